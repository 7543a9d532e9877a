package realtime

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/tracing"
	"github.com/qmq-go/qmq/realtime/store"
)

// traceStored records a "store <subject>" span (kind server) for each
// message of a settled send that carries a trace context, from the
// request's arrival (start) to now (the append is durable); messages
// without one make no span. Runs only with Options.TracerProvider set.
func (b *Broker) traceStored(batch [][]byte, results []store.Result, start time.Time) {
	tracer := b.opts.TracerProvider.Tracer(tracing.Instrumentation)
	end := time.Now()
	for j, raw := range batch {
		v, err := protocol.ParseMessageNoCRC(raw)
		if err != nil || j >= len(results) {
			continue
		}
		ctx := tracing.ExtractView(context.Background(), &v)
		if !trace.SpanContextFromContext(ctx).IsValid() {
			continue
		}
		_, span := tracer.Start(ctx, "store "+string(v.Subject), trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start),
			trace.WithAttributes(attribute.String("messaging.system", "qmq"), attribute.String("messaging.destination.name", string(v.Subject)),
				attribute.String("messaging.message.id", string(v.ID)), attribute.String("qmq.broker_group", b.opts.Group),
				attribute.Int64("qmq.offset", results[j].Offset)))
		if err := results[j].Err; err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End(trace.WithTimestamp(end))
	}
}

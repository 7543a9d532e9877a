package realtime

import (
	"context"
	"slices"
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
// request's arrival (s.start) to now (the append is durable). The send's
// checks noted which messages carry one (sendCall.traced: a traceparent
// among their properties), so a message without one costs nothing here:
// no parse, no span. Runs only with Options.TracerProvider set.
func (b *Broker) traceStored(s *sendCall, results []store.Result) {
	end := trace.WithTimestamp(time.Now())
	for _, i := range s.traced {
		j, ok := slices.BinarySearch(s.index, i) // the message's batch position
		if !ok || j >= len(results) {
			continue // a duplicate, not stored by this send
		}
		v, err := protocol.ParseMessageNoCRC(s.batch[j])
		if err != nil {
			continue
		}
		ctx := tracing.ExtractView(context.Background(), &v)
		if !trace.SpanContextFromContext(ctx).IsValid() {
			continue
		}
		_, span := b.tracer.Start(ctx, "store "+string(v.Subject), trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(s.start),
			trace.WithAttributes(attribute.String("messaging.system", "qmq"), attribute.String("messaging.destination.name", string(v.Subject)),
				attribute.String("messaging.message.id", string(v.ID)), attribute.String("qmq.broker_group", b.opts.Group),
				attribute.Int64("qmq.offset", results[j].Offset)))
		if err := results[j].Err; err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End(end)
	}
}

package delay

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/qmq-go/qmq/delay/store"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/tracing"
)

// traceScheduled records a "schedule <subject>" span (kind server) for each
// message of a settled send that carries a trace context, from the
// request's arrival to now (the append is durable), with its due time;
// messages without one make no span. Runs only with a TracerProvider.
func (m *master) traceScheduled(msgs [][]byte, results []store.Result, arrived time.Time) {
	tracer := m.s.opts.TracerProvider.Tracer(tracing.Instrumentation)
	end := time.Now()
	for j, raw := range msgs {
		v, err := protocol.ParseMessageNoCRC(raw)
		if err != nil || j >= len(results) {
			continue
		}
		ctx := tracing.ExtractView(context.Background(), &v)
		if !trace.SpanContextFromContext(ctx).IsValid() {
			continue
		}
		_, span := tracer.Start(ctx, "schedule "+string(v.Subject), trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(arrived),
			trace.WithAttributes(attribute.String("messaging.system", "qmq"), attribute.String("messaging.destination.name", string(v.Subject)),
				attribute.String("messaging.message.id", string(v.ID)), attribute.String("qmq.delay_group", m.s.opts.Group),
				attribute.Int64("qmq.due_ms", v.DeliverAtMillis)))
		if err := results[j].Err; err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End(trace.WithTimestamp(end))
	}
}

// traceForward starts the "forward <subject>" span (kind producer) of a due
// message that carries a trace context, with how late it fired; nil when
// it carries none. The forward's callback ends it (endSpan).
func (m *master) traceForward(d store.Due) trace.Span {
	v, err := protocol.ParseMessageNoCRC(d.Message)
	if err != nil {
		return nil
	}
	ctx := tracing.ExtractView(context.Background(), &v)
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	now := m.s.clk.Now()
	_, span := m.s.opts.TracerProvider.Tracer(tracing.Instrumentation).Start(ctx, "forward "+string(v.Subject),
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "qmq"), attribute.String("messaging.destination.name", string(v.Subject)),
			attribute.String("messaging.message.id", string(v.ID)), attribute.String("qmq.delay_group", m.s.opts.Group),
			attribute.Int64("qmq.due_ms", d.DueMillis), attribute.Int64("qmq.fire_lateness_ms", now.UnixMilli()-d.DueMillis)))
	return span
}

// endSpan ends a span with err's status.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

package consumer

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/qmq-go/qmq/pkg/tracing"
)

// WithTracerProvider traces handling with OpenTelemetry (package
// pkg/tracing): each delivery to a handler makes a "handle <subject>" span
// (kind consumer) that continues the trace context the producer wrote
// into the message, and the handler's context carries it; a message
// without a trace context makes no span. nil, the default, turns tracing
// off.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		c.tracer = nil
		if tp != nil {
			c.tracer = tp.Tracer(tracing.Instrumentation)
		}
	}
}

// handleTraced runs the handler inside a span continuing m's trace.
func (s *Subscription) handleTraced(m *Message) error {
	ctx := tracing.Extract(s.handlerCx, m.Properties)
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return s.safeHandle(s.handlerCx, m) // an untraced message makes no span
	}
	ctx, span := s.c.cfg.tracer.Start(ctx, "handle "+s.subject, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.system", "qmq"), attribute.String("messaging.destination.name", s.subject),
			attribute.String("messaging.consumer.group.name", s.group), attribute.String("messaging.message.id", m.ID),
			attribute.Int("qmq.attempt", m.Attempts+1)))
	err := s.safeHandle(ctx, m)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	return err
}

package producer

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/qmq-go/qmq/pkg/tracing"
)

// WithTracerProvider traces sends with OpenTelemetry (package
// pkg/tracing): each Send and SendAsync makes a "send <subject>" span
// (kind producer, a child of Send's context) and, when it is sampled, writes its W3C trace
// context into the message's properties, which the broker and the
// consumer continue. nil, the default, turns tracing off (no property is
// written, no span made). otlp.FromEnvironment (pkg/tracing/otlp) builds one from the
// standard OTEL_* variables.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		c.tracer = nil
		if tp != nil {
			c.tracer = tp.Tracer(tracing.Instrumentation)
		}
	}
}

// sendSpanOptions are every send span's start options, made once: built
// at each Start (the option is a closure over the kind), with the slice
// holding them, they were two of an unsampled send's four allocations.
var sendSpanOptions = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}

// startSend starts msg's send span and, when the span is sampled, injects
// its context into msg. A message of a trace that is not sampled carries
// nothing: the broker and the consumer make no span for it, which is what
// a parent-based sampler would decide for them anyway, and the message
// stays its own size (a traceparent is 55 bytes more per message).
func (p *Producer) startSend(ctx context.Context, msg *Message) trace.Span {
	ctx, span := p.cfg.tracer.Start(ctx, "send", sendSpanOptions...)
	if span.IsRecording() {
		span.SetName("send " + msg.Subject) // named only when kept: the name costs an allocation
		span.SetAttributes(attribute.String("messaging.system", "qmq"), attribute.String("messaging.destination.name", msg.Subject))
	}
	if span.SpanContext().IsSampled() {
		tracing.Inject(ctx, &msg.Properties)
	}
	return span
}

func endSend(span trace.Span, msg *Message, err error) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("messaging.message.id", msg.ID))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func (p *Producer) sendTraced(ctx context.Context, msg *Message) error {
	span := p.startSend(ctx, msg)
	err := p.send(ctx, msg)
	endSend(span, msg, err)
	return err
}

func (p *Producer) sendAsyncTraced(msg *Message, callback func(*Message, error)) error {
	span := p.startSend(context.Background(), msg)
	if !span.IsRecording() {
		return p.enqueue(context.Background(), msg, callback, nil) // nothing to end
	}
	err := p.enqueue(context.Background(), msg, func(m *Message, err error) {
		endSend(span, m, err)
		if callback != nil {
			callback(m, err)
		}
	}, nil)
	if err != nil {
		endSend(span, msg, err)
	}
	return err
}

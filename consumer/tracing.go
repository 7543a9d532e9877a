package consumer

import (
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/qmq-go/qmq/pkg/tracing"
)

// WithTracerProvider traces consuming with OpenTelemetry (package
// pkg/tracing). A message that carries the trace context its producer
// wrote makes three spans in that trace: "receive <subject>" (kind
// consumer) from the pull's answer to the handler's start (the wait in the
// subscription's buffer), "handle <subject>" (kind consumer) around the
// handler, whose context carries it, and "ack <subject>" (kind client)
// from the message's outcome to the broker's answer to the ack that
// covers it (ended with an error status when the subscription stops
// first: the broker then hands the message out again). A message without
// a trace context makes no span. nil, the default, turns tracing off.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		c.tracer = nil
		if tp != nil {
			c.tracer = tp.Tracer(tracing.Instrumentation)
		}
	}
}

// handleTraced runs the handler inside a span continuing d's message's
// trace, after a span for its wait since the pull, and keeps the trace
// context for the ack span (delivery.finish).
func (s *Subscription) handleTraced(d *delivery) error {
	m := d.msg
	if !tracing.Carries(m.Properties) {
		return s.safeHandle(s.handlerCx, m) // an untraced message makes no span, and costs no Extract
	}
	ctx := tracing.Extract(s.handlerCx, m.Properties)
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return s.safeHandle(s.handlerCx, m) // an untraced message makes no span
	}
	d.traced = ctx
	attrs := trace.WithAttributes(attribute.String("messaging.system", "qmq"), attribute.String("messaging.destination.name", s.subject),
		attribute.String("messaging.consumer.group.name", s.group), attribute.String("messaging.message.id", m.ID),
		attribute.Int("qmq.attempt", m.Attempts+1))
	if !d.pulled.IsZero() {
		_, receive := s.c.cfg.tracer.Start(ctx, "receive "+s.subject, trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithTimestamp(d.pulled), attrs)
		receive.End()
	}
	ctx, span := s.c.cfg.tracer.Start(ctx, "handle "+s.subject, trace.WithSpanKind(trace.SpanKindConsumer), attrs)
	err := s.safeHandle(ctx, m)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	return err
}

// ackSpans holds a puller's "ack" spans, by pull seq, until the broker
// answers the ack that covers them.
type ackSpans struct {
	mu    sync.Mutex
	spans map[uint64]trace.Span
}

// start starts the ack span of a traced delivery that just finished.
func (a *ackSpans) start(d *delivery, outcome error) {
	s := d.p.s
	_, span := s.c.cfg.tracer.Start(d.traced, "ack "+s.subject, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("messaging.system", "qmq"), attribute.String("messaging.destination.name", d.p.subject),
			attribute.String("messaging.consumer.group.name", s.group), attribute.String("messaging.message.id", d.msg.ID),
			attribute.Bool("qmq.retried", outcome != nil)))
	a.mu.Lock()
	if a.spans == nil {
		a.spans = map[uint64]trace.Span{}
	}
	a.spans[d.pullSeq] = span
	a.mu.Unlock()
}

// ackedBelow ends the spans of pull seqs below next (a range ack answered).
func (a *ackSpans) ackedBelow(next uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for seq, span := range a.spans {
		if seq < next {
			span.End()
			delete(a.spans, seq)
		}
	}
}

// acked ends the span of one pull seq (an AckEach ack answered).
func (a *ackSpans) acked(seq uint64) {
	a.mu.Lock()
	span, ok := a.spans[seq]
	delete(a.spans, seq)
	a.mu.Unlock()
	if ok {
		span.End()
	}
}

// unacked ends every span left when the puller stops: those messages were
// not acked here.
func (a *ackSpans) unacked() {
	a.mu.Lock()
	defer a.mu.Unlock()
	at := time.Now()
	for seq, span := range a.spans {
		span.SetStatus(codes.Error, "not acked before the subscription stopped: the broker hands the message out again")
		span.End(trace.WithTimestamp(at))
		delete(a.spans, seq)
	}
}

package producer

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/tracing"
)

// WithTracerProvider traces sends with OpenTelemetry (package
// pkg/tracing). Send makes a "send <subject>" span (kind producer, a child
// of Send's context) for its message; SendAsync's messages, which have no
// context, are traced by send request: the first one to join a request
// starts its "send <subject>" span (a root, kind producer, ended when the
// broker answers), and when the sampler keeps it every SendAsync message
// of the request carries its trace context, so a message not sampled costs
// nothing per message (one sampling decision per request, where one per
// message was a fifth of a producing process's CPU at 1 % sampling). A
// sampled span's W3C trace context is written into its messages'
// properties, which the broker and the consumer continue. nil, the
// default, turns tracing off (no property is written, no span made).
// otlp.FromEnvironment (pkg/tracing/otlp) builds one from the standard
// OTEL_* variables.
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
	pd, err := p.prepare(msg, callback, nil, p.cfg.now(), nil)
	if err != nil {
		return err
	}
	pd.traceRoot = true // traced with its request: traceInBatch
	return p.queuePending(context.Background(), pd)
}

// traceInBatch decides pd's trace with its request's (sendLoop): the
// request's first SendAsync message starts its send span; when that is
// sampled, pd gets its context (formatted once a request) and is encoded
// again with it (a message that no longer fits its limits then goes as it
// was, untraced).
func (s *sender) traceInBatch(b *batch, pd *pending) {
	pd.traceRoot = false // decided: a retry keeps what it got
	if b.span == nil {
		var ctx context.Context
		ctx, b.span = s.p.cfg.tracer.Start(context.Background(), "send", sendSpanOptions...)
		if b.span.IsRecording() {
			b.span.SetName("send " + pd.subject)
			b.span.SetAttributes(attribute.String("messaging.system", "qmq"), attribute.String("messaging.destination.name", pd.subject))
		}
		if b.span.SpanContext().IsSampled() {
			tracing.Inject(ctx, &b.traceProps)
		}
	}
	if len(b.traceProps) == 0 || pd.msg == nil {
		return
	}
	msg := pd.msg
	props := msg.Properties
	for _, tp := range b.traceProps {
		props = tracing.SetProperty(props, tp.Key, tp.Value)
	}
	old := msg.Properties
	msg.Properties = props
	raw, err := protocol.AppendMessage(make([]byte, 0, msg.EncodedSize()), msg, s.p.cfg.limits)
	if err != nil {
		msg.Properties = old
		return
	}
	pd.raw = raw
}

// endBatchSpan ends a send request's span once the broker answered (err:
// the request failed; statuses: each message's).
func endBatchSpan(span trace.Span, msgs []*pending, statuses []protocol.Status, err error) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Int("messaging.batch.message_count", len(msgs)))
	failed := 0
	for _, st := range statuses {
		if !st.Success() {
			failed++
		}
	}
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case failed > 0:
		span.SetStatus(codes.Error, fmt.Sprintf("%d of %d messages not stored", failed, len(msgs)))
	}
	span.End()
}

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

// storedSpan is what a "store" span needs of a traced message, copied out
// of the send's buffers.
type storedSpan struct {
	carrier []protocol.Property // its traceparent and tracestate
	subject string
	id      string
	offset  int64
	err     error
}

// traceStored records a "store <subject>" span (kind server) for each
// message of a settled send that carries a trace context, from the
// request's arrival (s.start) to now (the append is durable). The send's
// checks noted which messages carry one (sendCall.traced: a traceparent
// among their properties), so a message without one costs nothing here:
// no parse, no span. It runs where the send settles (the store's commit
// goroutine, or the event loop): it only copies what the spans need, and
// a goroutine of its own makes them (a sampled request's 256 spans made
// there held back the commits after it). Runs only with
// Options.TracerProvider set.
func (b *Broker) traceStored(s *sendCall, results []store.Result) {
	end := time.Now()
	var spans []storedSpan
	for _, i := range s.traced {
		j, ok := slices.BinarySearch(s.index, i) // the message's batch position
		if !ok || j >= len(results) {
			continue // a duplicate, not stored by this send
		}
		v := &s.views[j]
		sp := storedSpan{subject: string(v.Subject), id: string(v.ID), offset: results[j].Offset, err: results[j].Err}
		v.Properties(func(k, val []byte) bool {
			if ks := string(k); ks == "traceparent" || ks == "tracestate" {
				sp.carrier = append(sp.carrier, protocol.Property{Key: ks, Value: string(val)})
			}
			return true
		})
		spans = append(spans, sp)
	}
	if len(spans) > 0 {
		go b.recordStored(spans, s.start, end)
	}
}

// recordStored makes the store spans traceStored collected.
func (b *Broker) recordStored(spans []storedSpan, start, end time.Time) {
	for _, sp := range spans {
		ctx := tracing.Extract(context.Background(), sp.carrier)
		if !trace.SpanContextFromContext(ctx).IsValid() {
			continue
		}
		_, span := b.tracer.Start(ctx, "store "+sp.subject, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start),
			trace.WithAttributes(attribute.String("messaging.system", "qmq"), attribute.String("messaging.destination.name", sp.subject),
				attribute.String("messaging.message.id", sp.id), attribute.String("qmq.broker_group", b.opts.Group),
				attribute.Int64("qmq.offset", sp.offset)))
		if sp.err != nil {
			span.RecordError(sp.err)
			span.SetStatus(codes.Error, sp.err.Error())
		}
		span.End(trace.WithTimestamp(end))
	}
}

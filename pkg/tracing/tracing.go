// Package tracing carries OpenTelemetry trace context in message
// properties (W3C Trace Context: the properties traceparent and
// tracestate) and builds a tracer provider from the standard OTEL_*
// environment variables.
//
// Tracing is off unless a tracer provider is given to the producer,
// consumer, broker or delay server (their WithTracerProvider options,
// realtime.Options.TracerProvider and delay.Options.TracerProvider); off,
// no property is read or written and no span is made, so it costs a nil
// check. On, the producer starts a "send <subject>" span (kind producer;
// for SendAsync one a send request, whose messages all carry its context
// when it is sampled) and injects its context into the message; a
// message of a trace not sampled carries nothing, and the broker and the
// consumer look at it no further than for a traceparent property
// (Carries, ViewCarries). A delay server records
// "schedule <subject>" (kind server, to the durable append) and "forward
// <subject>" (kind producer, from the firing to the realtime broker's
// ack); the broker "store <subject>" (kind server) from a message's
// arrival to its durable append; the consumer "receive <subject>" (the
// wait since the pull), "handle <subject>" around the handler (kind
// consumer) and "ack <subject>" (kind client, to the broker's answer to
// the ack) — each a child of the context the message carries, so one
// trace id runs from producer to consumer. Sampling is the producer's (the sampled flag travels; the
// broker's and consumer's default samplers follow their parent).
//
// Package otlp (pkg/tracing/otlp) builds a tracer provider that exports
// over OTLP from the standard OTEL_* variables; it is apart so that
// clients that do not export link no gRPC.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/propagation"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// Instrumentation is the name every QMQ tracer is made with.
const Instrumentation = "github.com/qmq-go/qmq"

var propagator = propagation.TraceContext{}

// traceparent is the property (W3C Trace Context's header) that carries a
// message's trace context.
const traceparent = "traceparent"

// carrier reads and writes a message's properties.
type carrier struct{ props *[]protocol.Property }

func (c carrier) Get(key string) string {
	for _, p := range *c.props {
		if p.Key == key {
			return p.Value
		}
	}
	return ""
}

func (c carrier) Set(key, value string) {
	for i, p := range *c.props {
		if p.Key == key {
			(*c.props)[i].Value = value
			return
		}
	}
	*c.props = append(*c.props, protocol.Property{Key: key, Value: value})
}

func (c carrier) Keys() []string {
	keys := make([]string, 0, len(*c.props))
	for _, p := range *c.props {
		keys = append(keys, p.Key)
	}
	return keys
}

// Inject writes the span context of ctx into props (traceparent and, when
// set, tracestate), replacing earlier values.
func Inject(ctx context.Context, props *[]protocol.Property) {
	propagator.Inject(ctx, carrier{props})
}

// Extract returns ctx with the remote span context props carry, if any.
func Extract(ctx context.Context, props []protocol.Property) context.Context {
	return propagator.Extract(ctx, carrier{&props})
}

// ExtractView is Extract for a parsed message, without decoding it.
func ExtractView(ctx context.Context, v *protocol.View) context.Context {
	if v.PropertyCount() == 0 {
		return ctx
	}
	var props []protocol.Property
	v.Properties(func(k, val []byte) bool {
		if ks := string(k); ks == "traceparent" || ks == "tracestate" {
			props = append(props, protocol.Property{Key: ks, Value: string(val)})
		}
		return true
	})
	if len(props) == 0 {
		return ctx
	}
	return Extract(ctx, props)
}

// Carries reports whether props hold a trace context (a traceparent): a
// caller checks it before Extract, which costs an allocation even when
// there is nothing to extract.
func Carries(props []protocol.Property) bool {
	for i := range props {
		if props[i].Key == traceparent {
			return true
		}
	}
	return false
}

// ViewCarries is Carries for a parsed message.
func ViewCarries(v *protocol.View) bool {
	found := false
	if v.PropertyCount() > 0 {
		v.Properties(func(k, _ []byte) bool {
			found = string(k) == traceparent
			return !found
		})
	}
	return found
}

// SetProperty returns props with key set to value: an earlier value
// replaced, or the property appended.
func SetProperty(props []protocol.Property, key, value string) []protocol.Property {
	carrier{&props}.Set(key, value)
	return props
}

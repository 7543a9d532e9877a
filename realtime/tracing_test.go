package realtime_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap/zaptest"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"
)

// With a tracer provider on each side, a message's trace runs producer →
// broker → consumer under one trace id: the broker's store span and the
// consumer's handle span are children of the producer's send span. A
// producer without one writes no trace context, and the broker and the
// consumer then make no span.
func TestTracing_ProducerBrokerConsumerShareATrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b := startBroker(t, t.TempDir(), func(o *realtime.Options) { o.TracerProvider = tp })
	traced, err := producer.New(producer.WithBrokers(b.addr()), producer.WithLogger(zaptest.NewLogger(t)),
		producer.WithTransportOptions(fastTransport), producer.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { traced.Close(context.Background()) })
	plain := newProducer(t, b.addr())
	c, err := consumer.New(consumer.WithBrokers(b.addr()), consumer.WithConsumerID("c1"), consumer.WithLogger(zaptest.NewLogger(t)),
		consumer.WithTransportOptions(fastTransport), consumer.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	handled := make(chan string, 10)
	if _, err := c.Subscribe("traced", "g", func(ctx context.Context, m *consumer.Message) error {
		handled <- m.ID
		return nil
	}, consumer.StartEarliest()); err != nil {
		t.Fatal(err)
	}
	if err := traced.Send(context.Background(), &producer.Message{Subject: "traced", ID: "m-traced", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := plain.Send(context.Background(), &producer.Message{Subject: "traced", ID: "m-plain", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-handled:
		case <-time.After(20 * time.Second):
			t.Fatal("messages not handled")
		}
	}
	testutil.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := len(exp.GetSpans()); n < 5 {
			return fmt.Errorf("%d spans", n)
		}
		return nil
	})
	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		if _, dup := spans[s.Name]; dup {
			t.Fatalf("two %q spans: the untraced message made one too", s.Name)
		}
		spans[s.Name] = s
	}
	send, store, handle := spans["send traced"], spans["store traced"], spans["handle traced"]
	if !send.SpanContext.IsValid() || !store.SpanContext.IsValid() || !handle.SpanContext.IsValid() {
		t.Fatalf("spans %v", spans)
	}
	id := send.SpanContext.TraceID()
	if store.SpanContext.TraceID() != id || handle.SpanContext.TraceID() != id {
		t.Fatalf("trace ids: send %s, store %s, handle %s", id, store.SpanContext.TraceID(), handle.SpanContext.TraceID())
	}
	if store.Parent.SpanID() != send.SpanContext.SpanID() || handle.Parent.SpanID() != send.SpanContext.SpanID() {
		t.Fatalf("parents: store %s, handle %s, want the send span %s", store.Parent.SpanID(), handle.Parent.SpanID(), send.SpanContext.SpanID())
	}
	// The consumer's wait since the pull and its ack, in the same trace;
	// the ack span ends once the broker answered the ack, after the handler.
	receive, ack := spans["receive traced"], spans["ack traced"]
	if receive.SpanContext.TraceID() != id || ack.SpanContext.TraceID() != id ||
		receive.Parent.SpanID() != send.SpanContext.SpanID() || ack.Parent.SpanID() != send.SpanContext.SpanID() {
		t.Fatalf("receive %+v and ack %+v spans, want children of the send span %s", receive.SpanContext, ack.SpanContext, send.SpanContext.SpanID())
	}
	if receive.EndTime.After(handle.StartTime) || ack.StartTime.Before(handle.EndTime) || ack.SpanKind != trace.SpanKindClient {
		t.Fatalf("receive %v-%v, handle %v-%v, ack %v-%v (%v)", receive.StartTime, receive.EndTime, handle.StartTime, handle.EndTime,
			ack.StartTime, ack.EndTime, ack.SpanKind)
	}
	if len(spans) != 5 {
		t.Fatalf("spans %d, want send, store, receive, handle and ack only", len(spans))
	}
}

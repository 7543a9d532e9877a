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

// SendAsync's messages are traced by send request: each request's send
// span is a root, and every message of a sampled request carries its
// context (the broker's store span and the consumer's handle span are its
// children); with a sampler that keeps nothing, no message carries a
// context and no side makes a span.
func TestTracing_SendAsyncTracesByRequest(t *testing.T) {
	for _, sampled := range []bool{true, false} {
		t.Run(fmt.Sprint("sampled=", sampled), func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			sampler := sdktrace.AlwaysSample()
			if !sampled {
				sampler = sdktrace.NeverSample()
			}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sampler))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			b := startBroker(t, t.TempDir(), func(o *realtime.Options) { o.TracerProvider = tp })
			p, err := producer.New(producer.WithBrokers(b.addr()), producer.WithLogger(zaptest.NewLogger(t)),
				producer.WithTransportOptions(fastTransport), producer.WithTracerProvider(tp), producer.WithBatch(4, 1<<20))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close(context.Background()) })
			c, err := consumer.New(consumer.WithBrokers(b.addr()), consumer.WithConsumerID("c1"), consumer.WithLogger(zaptest.NewLogger(t)),
				consumer.WithTransportOptions(fastTransport), consumer.WithTracerProvider(tp))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close(context.Background()) })
			const n = 10
			handled := make(chan *consumer.Message, n)
			if _, err := c.Subscribe("async", "g", func(ctx context.Context, m *consumer.Message) error {
				handled <- m
				return nil
			}, consumer.StartEarliest()); err != nil {
				t.Fatal(err)
			}
			sent := make(chan error, n)
			for i := range n {
				if err := p.SendAsync(&producer.Message{Subject: "async", ID: fmt.Sprint("a-", i), Body: []byte("x")},
					func(_ *producer.Message, err error) { sent <- err }); err != nil {
					t.Fatal(err)
				}
			}
			for range n {
				if err := <-sent; err != nil {
					t.Fatal(err)
				}
			}
			for range n {
				select {
				case m := <-handled:
					carries := false
					for _, pr := range m.Properties {
						carries = carries || pr.Key == "traceparent"
					}
					if carries != sampled {
						t.Fatalf("message %s carries a trace context: %v", m.ID, carries)
					}
				case <-time.After(20 * time.Second):
					t.Fatal("messages not handled")
				}
			}
			if !sampled {
				time.Sleep(100 * time.Millisecond)
				if spans := exp.GetSpans(); len(spans) != 0 {
					t.Fatalf("%d spans made with nothing sampled", len(spans))
				}
				return
			}
			count := func(name string) int {
				k := 0
				for _, s := range exp.GetSpans() {
					if s.Name == name {
						k++
					}
				}
				return k
			}
			testutil.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
				if count("store async") < n || count("handle async") < n {
					return fmt.Errorf("%d store and %d handle spans", count("store async"), count("handle async"))
				}
				return nil
			})
			sends := map[trace.SpanID]tracetest.SpanStub{}
			for _, s := range exp.GetSpans() {
				if s.Name == "send async" {
					if s.Parent.IsValid() || s.SpanKind != trace.SpanKindProducer {
						t.Fatalf("send span %+v: want a root of kind producer", s.SpanContext)
					}
					sends[s.SpanContext.SpanID()] = s
				}
			}
			if len(sends) == 0 || len(sends) > n {
				t.Fatalf("%d send spans for %d messages", len(sends), n)
			}
			for _, s := range exp.GetSpans() {
				if s.Name != "store async" && s.Name != "handle async" {
					continue
				}
				parent, ok := sends[s.Parent.SpanID()]
				if !ok || parent.SpanContext.TraceID() != s.SpanContext.TraceID() {
					t.Fatalf("%s span with parent %s: not a send span", s.Name, s.Parent.SpanID())
				}
			}
		})
	}
}

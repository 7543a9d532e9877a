package delay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/producer"
)

// A traced delayed message's trace holds the delay server's spans: its
// schedule (the durable append) and its forward (from the firing, at or
// after its due time, to the realtime broker's ack), both children of the
// producer's send span; an untraced message makes none.
func TestTracing_DelayScheduleAndForward(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	mu, got := subscribe(t, rtAddr, "timed")
	o := delay.NewOptions()
	o.Addr, o.HTTPAddr, o.DataDir, o.Realtime, o.TracerProvider = "127.0.0.1:0", "", t.TempDir(), []string{rtAddr}, tp
	dl := startDelayWith(t, o)
	resolver := route.NewStatic(route.Groups(rtAddr), route.Groups(dl.Addr().String()))
	traced, err := producer.New(producer.WithResolver(resolver), producer.WithTransportOptions(fastTransport), producer.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer traced.Close(context.Background())
	plain, err := producer.New(producer.WithResolver(resolver), producer.WithTransportOptions(fastTransport))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(context.Background())
	due := time.Now().Add(1500 * time.Millisecond) // past the producer's 500 ms: through the delay server
	m := &producer.Message{Subject: "timed", ID: "m-traced", Body: []byte("x"), DeliverAt: due}
	if err := traced.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if err := plain.Send(context.Background(), &producer.Message{Subject: "timed", ID: "m-plain", Body: []byte("x"), DeliverAt: due}); err != nil {
		t.Fatal(err)
	}
	testutil.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		mu.Lock()
		n := len(got["m-traced"]) + len(got["m-plain"])
		mu.Unlock()
		spans := exp.GetSpans()
		if n != 2 || len(spans) < 3 {
			names := []string{}
			for _, s := range spans {
				names = append(names, s.Name)
			}
			return fmt.Errorf("%d messages delivered, spans %v", n, names)
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
	send, schedule, forward := spans["send timed"], spans["schedule timed"], spans["forward timed"]
	id := send.SpanContext.TraceID()
	for name, s := range map[string]tracetest.SpanStub{"schedule": schedule, "forward": forward} {
		if !s.SpanContext.IsValid() || s.SpanContext.TraceID() != id || s.Parent.SpanID() != send.SpanContext.SpanID() {
			t.Fatalf("%s span %+v, want a child of the send span %s (spans %v)", name, s.SpanContext, send.SpanContext.SpanID(), spans)
		}
	}
	if schedule.SpanKind != trace.SpanKindServer || forward.SpanKind != trace.SpanKindProducer {
		t.Fatalf("kinds: schedule %v, forward %v", schedule.SpanKind, forward.SpanKind)
	}
	if forward.StartTime.Before(due.Truncate(time.Millisecond)) || forward.StartTime.Before(schedule.EndTime) || forward.EndTime.Before(forward.StartTime) {
		t.Fatalf("schedule %v-%v, forward %v-%v, due %v", schedule.StartTime, schedule.EndTime, forward.StartTime, forward.EndTime, due)
	}
}

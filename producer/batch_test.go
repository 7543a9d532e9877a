package producer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/tracing"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func batchOf(n int, subject string) []*Message {
	msgs := make([]*Message, n)
	for i := range msgs {
		msgs[i] = &Message{Subject: subject, Body: []byte(fmt.Sprint("m", i))}
	}
	return msgs
}

// A batch to one subject goes to one group in one request, every message
// stored with the id it was given.
func TestSendBatch_OneRequest(t *testing.T) {
	b1, b2 := startFakeBroker(t), startFakeBroker(t)
	p := newProducer(t, WithBrokers(b1.addr(), b2.addr()))
	msgs := batchOf(100, "s")
	msgs[7].ID = "given-id"
	if errs := p.SendBatch(context.Background(), msgs); errs != nil {
		t.Fatalf("errors: %v", errs)
	}
	if b1.requests()+b2.requests() != 1 || b1.count()+b2.count() != 100 {
		t.Fatalf("%d+%d requests, %d+%d stored; want 1 request of 100", b1.requests(), b2.requests(), b1.count(), b2.count())
	}
	seen := map[string]bool{}
	for i, m := range msgs {
		if m.ID == "" || m.Created.IsZero() || seen[m.ID] || !(b1.has(m.ID) || b2.has(m.ID)) {
			t.Fatalf("message %d: id %q created %v: not filled in, repeated or not stored", i, m.ID, m.Created)
		}
		seen[m.ID] = true
	}
	if msgs[7].ID != "given-id" {
		t.Fatalf("given id replaced by %s", msgs[7].ID)
	}
	// Larger than WithBatch: split into requests of at most its size.
	p2 := newProducer(t, WithBrokers(b1.addr()), WithBatch(64, 1<<20))
	before := b1.requests()
	if errs := p2.SendBatch(context.Background(), batchOf(200, "s")); errs != nil {
		t.Fatalf("errors: %v", errs)
	}
	if got := b1.requests() - before; got != 4 {
		t.Fatalf("%d requests for 200 messages at 64 a request, want 4", got)
	}
}

// A status per message: a refused message fails at once with its status,
// an invalid one before it is sent, one answered busy is retried on the
// queued path and stored; the rest are stored.
func TestSendBatch_PartialRefusal(t *testing.T) {
	b := startFakeBroker(t)
	var mu sync.Mutex
	busyOnce := map[string]bool{}
	refuse := func(m *protocol.Message) protocol.Status {
		switch string(m.Body) {
		case "m3":
			return protocol.StatusTooLarge
		case "m5":
			mu.Lock()
			defer mu.Unlock()
			if !busyOnce[m.ID] {
				busyOnce[m.ID] = true
				return protocol.StatusBusy
			}
		}
		return protocol.StatusOK
	}
	b.mu.Lock()
	b.refuse = refuse
	b.mu.Unlock()
	p := newProducer(t, WithBrokers(b.addr()))
	msgs := batchOf(10, "s")
	msgs[8].Subject = "bad subject!"
	errs := p.SendBatch(context.Background(), msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("%d errors for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		switch i {
		case 3:
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("message 3: %v, want ErrTooLarge", err)
			}
		case 8:
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("message 8: %v, want ErrInvalid", err)
			}
		default:
			if err != nil || !b.has(msgs[i].ID) {
				t.Fatalf("message %d: %v, stored %v", i, err, b.has(msgs[i].ID))
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !busyOnce[msgs[5].ID] {
		t.Fatal("message 5 was not answered busy first")
	}
	if b.count() != 8 {
		t.Fatalf("stored %d, want 8", b.count())
	}
}

// A readonly group and a dead group among three: every batch ends up
// stored on the healthy one, no message lost or failed.
func TestSendBatch_RetriesOnAnotherGroup(t *testing.T) {
	healthy, readonly, dead := startFakeBroker(t), startFakeBroker(t), startFakeBroker(t)
	readonly.set(protocol.StatusReadonly, 0)
	deadAddr := dead.addr()
	dead.stop()
	p := newProducer(t, WithBrokers(healthy.addr(), readonly.addr(), deadAddr), WithSendTimeout(10*time.Second))
	for i := range 30 {
		if errs := p.SendBatch(context.Background(), batchOf(20, "s")); errs != nil {
			t.Fatalf("batch %d: %v", i, errs)
		}
	}
	if healthy.count() != 600 || readonly.count() != 0 {
		t.Fatalf("healthy stored %d, readonly %d", healthy.count(), readonly.count())
	}
}

// A busy group past the send timeout: every message fails with
// ErrSendTimeout wrapping the busy status.
func TestSendBatch_TimesOut(t *testing.T) {
	b := startFakeBroker(t)
	b.set(protocol.StatusBusy, 0)
	p := newProducer(t, WithBrokers(b.addr()), WithSendTimeout(300*time.Millisecond))
	errs := p.SendBatch(context.Background(), batchOf(5, "s"))
	for i, err := range errs {
		if !errors.Is(err, ErrSendTimeout) || !errors.Is(err, protocol.ErrBusy) {
			t.Fatalf("message %d: %v, want ErrSendTimeout wrapping ErrBusy", i, err)
		}
	}
	if len(errs) != 5 {
		t.Fatalf("%d errors", len(errs))
	}
}

// Messages due 500 ms or more ahead go to the delay groups, the others to
// the realtime groups: one request each.
func TestSendBatch_DelayedToDelayGroups(t *testing.T) {
	rt, dl := startFakeBroker(t), startFakeBroker(t)
	p := newProducer(t, WithResolver(route.NewStatic(route.Groups(rt.addr()), route.Groups(dl.addr()))))
	msgs := batchOf(10, "s")
	for i := 0; i < len(msgs); i += 2 {
		msgs[i].DeliverAt = time.Now().Add(time.Hour)
	}
	if errs := p.SendBatch(context.Background(), msgs); errs != nil {
		t.Fatalf("errors: %v", errs)
	}
	for i, m := range msgs {
		if want := map[bool]*fakeBroker{true: dl, false: rt}[i%2 == 0]; !want.has(m.ID) {
			t.Fatalf("message %d (delayed %v) not on its group", i, i%2 == 0)
		}
	}
	if rt.requests() != 1 || dl.requests() != 1 || rt.count() != 5 || dl.count() != 5 {
		t.Fatalf("realtime %d requests %d stored, delay %d requests %d stored", rt.requests(), rt.count(), dl.requests(), dl.count())
	}
}

// A closed producer fails every message of a batch with ErrClosed; a
// context that ends while the broker holds the answer fails them with its
// error.
func TestSendBatch_ClosedAndCancelled(t *testing.T) {
	b := startFakeBroker(t)
	p := newProducer(t, WithBrokers(b.addr()))
	hold := make(chan struct{})
	b.mu.Lock()
	b.hold = hold
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	errs := p.SendBatch(ctx, batchOf(3, "s"))
	close(hold)
	for i, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("message %d: %v, want DeadlineExceeded", i, err)
		}
	}
	if len(errs) != 3 {
		t.Fatalf("%d errors", len(errs))
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	errs = p.SendBatch(context.Background(), batchOf(3, "s"))
	for i, err := range errs {
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("message %d after close: %v, want ErrClosed", i, err)
		}
	}
	if len(errs) != 3 {
		t.Fatalf("%d errors after close", len(errs))
	}
}

func (b *fakeBroker) requests() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reqs
}

// With tracing on a batch has one send span, a child of the caller's
// context; sampled, every message carries its context.
func TestSendBatch_Traced(t *testing.T) {
	for _, sampled := range []bool{true, false} {
		t.Run(fmt.Sprint("sampled=", sampled), func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			sampler := sdktrace.AlwaysSample()
			if !sampled {
				sampler = sdktrace.NeverSample()
			}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sampler))
			b := startFakeBroker(t)
			p := newProducer(t, WithBrokers(b.addr()), WithTracerProvider(tp))
			msgs := batchOf(5, "s")
			if errs := p.SendBatch(context.Background(), msgs); errs != nil {
				t.Fatalf("errors: %v", errs)
			}
			spans := exp.GetSpans()
			if !sampled {
				if len(spans) != 0 {
					t.Fatalf("%d spans recorded without sampling", len(spans))
				}
				for _, m := range msgs {
					if len(b.get(m.ID).Properties) != 0 {
						t.Fatalf("unsampled message carries %v", b.get(m.ID).Properties)
					}
				}
				return
			}
			if len(spans) != 1 || spans[0].Name != "send s" {
				t.Fatalf("spans %v, want one named send s", spans)
			}
			for _, m := range msgs {
				ctx := tracing.Extract(context.Background(), b.get(m.ID).Properties)
				if sc := trace.SpanContextFromContext(ctx); sc.TraceID() != spans[0].SpanContext.TraceID() || sc.SpanID() != spans[0].SpanContext.SpanID() {
					t.Fatalf("message %s carries %v, want the batch span %v", m.ID, sc, spans[0].SpanContext)
				}
			}
		})
	}
}

func (b *fakeBroker) get(id string) *protocol.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stored[id]
}

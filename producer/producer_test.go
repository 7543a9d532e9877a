package producer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/transport"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// gnet's package-level worker pool lives for the whole process.
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
	)
}

func newProducer(t *testing.T, opts ...Option) *Producer {
	t.Helper()
	opts = append([]Option{WithLogger(zaptest.NewLogger(t)), WithTransportOptions(transport.Options{
		RedialBackoffMin: 10 * time.Millisecond, RedialBackoffMax: 50 * time.Millisecond, RequestTimeout: time.Second,
	})}, opts...)
	p, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Close(ctx)
	})
	return p
}

func TestSend_RoundTrip(t *testing.T) {
	b := startFakeBroker(t)
	p := newProducer(t, WithBrokers(b.addr()))
	msg := &Message{Subject: "order.changed", Tags: []string{"hotel"}, Body: []byte("hello")}
	if err := p.Send(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	if msg.ID == "" || msg.Created.IsZero() {
		t.Fatal("id or created time not filled in")
	}
	if !b.has(msg.ID) {
		t.Fatal("broker did not store the message")
	}
	got := b.stored[msg.ID]
	if got.Subject != "order.changed" || string(got.Body) != "hello" || got.Tags[0] != "hotel" {
		t.Fatalf("stored %+v", got)
	}
}

// Many async sends over two groups: every message stored exactly once,
// spread over both groups, every callback called once with nil.
func TestSendAsync_SpreadsOverGroups(t *testing.T) {
	b1, b2 := startFakeBroker(t), startFakeBroker(t)
	p := newProducer(t, WithBrokers(b1.addr(), b2.addr()), WithBatch(64, 1<<20))
	const n = 20000
	var wg sync.WaitGroup
	var failures atomic.Int32
	wg.Add(n)
	for i := range n {
		err := p.SendAsync(&Message{Subject: fmt.Sprintf("s%d", i%7), Body: []byte("x")}, func(_ *Message, err error) {
			if err != nil {
				failures.Add(1)
			}
			wg.Done()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if failures.Load() != 0 {
		t.Fatalf("%d sends failed", failures.Load())
	}
	if b1.count()+b2.count() != n {
		t.Fatalf("stored %d + %d, want %d", b1.count(), b2.count(), n)
	}
	if b1.count() < n/4 || b2.count() < n/4 {
		t.Fatalf("round-robin uneven: %d vs %d", b1.count(), b2.count())
	}
	if b1.reqs+b2.reqs >= n/2 {
		t.Fatalf("%d requests for %d messages: not batching", b1.reqs+b2.reqs, n)
	}
}

// A readonly group and a dead group: every message ends up on the healthy
// group and the application sees no error.
func TestSend_MovesOffReadonlyAndDeadGroups(t *testing.T) {
	healthy, readonly, dead := startFakeBroker(t), startFakeBroker(t), startFakeBroker(t)
	readonly.set(protocol.StatusReadonly, 0)
	deadAddr := dead.addr()
	dead.stop()
	p := newProducer(t, WithBrokers(healthy.addr(), readonly.addr(), deadAddr), WithSendTimeout(10*time.Second))
	for i := range 300 {
		if err := p.Send(context.Background(), &Message{Subject: "s", Body: []byte{byte(i)}}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if healthy.count() != 300 || readonly.count() != 0 {
		t.Fatalf("healthy stored %d, readonly %d", healthy.count(), readonly.count())
	}
}

func TestSend_InvalidMessageFailsAtOnce(t *testing.T) {
	b := startFakeBroker(t)
	p := newProducer(t, WithBrokers(b.addr()))
	err := p.Send(context.Background(), &Message{Subject: "bad subject!", Body: []byte("x")})
	if !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
	err = p.SendAsync(&Message{Subject: "s", Body: make([]byte, 5<<20)}, nil)
	if !errors.Is(err, protocol.ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
}

func TestSend_NonRetryableStatusFails(t *testing.T) {
	b := startFakeBroker(t)
	b.set(protocol.StatusTooLarge, 0)
	p := newProducer(t, WithBrokers(b.addr()))
	err := p.Send(context.Background(), &Message{Subject: "s", Body: []byte("x")})
	if !errors.Is(err, protocol.ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
}

func TestSend_TimesOutWhenNoGroupWorks(t *testing.T) {
	b := startFakeBroker(t)
	b.set(protocol.StatusBusy, 0)
	p := newProducer(t, WithBrokers(b.addr()), WithSendTimeout(300*time.Millisecond))
	err := p.Send(context.Background(), &Message{Subject: "s", Body: []byte("x")})
	if !errors.Is(err, ErrSendTimeout) || !errors.Is(err, protocol.ErrBusy) {
		t.Fatalf("got %v, want ErrSendTimeout wrapping ErrBusy", err)
	}
}

func TestSend_DelayedWithoutDelayGroups(t *testing.T) {
	b := startFakeBroker(t)
	p := newProducer(t, WithBrokers(b.addr()), WithSendTimeout(200*time.Millisecond))
	err := p.Send(context.Background(), &Message{Subject: "s", DeliverAt: time.Now().Add(time.Hour)})
	if !errors.Is(err, route.ErrNoGroups) {
		t.Fatalf("got %v, want ErrNoGroups", err)
	}
	// Due in under 500 ms: a realtime message.
	if err := p.Send(context.Background(), &Message{Subject: "s", DeliverAt: time.Now().Add(100 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
}

func TestSendAsync_QueueFull(t *testing.T) {
	b := startFakeBroker(t)
	hold := make(chan struct{})
	b.mu.Lock()
	b.hold = hold
	b.mu.Unlock()
	p := newProducer(t, WithBrokers(b.addr()), WithNonBlocking(), WithQueueSize(4), WithBatch(1, 1<<20), WithMaxInFlight(1))
	var full bool
	for i := 0; i < 100 && !full; i++ {
		err := p.SendAsync(&Message{Subject: "s"}, nil)
		if errors.Is(err, ErrQueueFull) {
			full = true
		} else if err != nil {
			t.Fatal(err)
		}
	}
	close(hold)
	if !full {
		t.Fatal("queue never reported full")
	}
}

func TestClose_FlushesQueuedMessages(t *testing.T) {
	b := startFakeBroker(t)
	b.set(0, 20*time.Millisecond)
	p, err := New(WithBrokers(b.addr()), WithBatch(10, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	var done atomic.Int32
	for range 500 {
		if err := p.SendAsync(&Message{Subject: "s"}, func(_ *Message, err error) {
			if err == nil {
				done.Add(1)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if done.Load() != 500 || b.count() != 500 {
		t.Fatalf("after Close: %d callbacks ok, %d stored", done.Load(), b.count())
	}
	if err := p.SendAsync(&Message{Subject: "s"}, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
}

func TestClose_GivesUpAtDeadline(t *testing.T) {
	b := startFakeBroker(t)
	b.set(protocol.StatusBusy, 0)
	p, err := New(WithBrokers(b.addr()))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	p.SendAsync(&Message{Subject: "s"}, func(_ *Message, err error) { errc <- err })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := p.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v", err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("callback: %v", err)
	}
}

func TestSelector_AvoidsFailedAndSlowGroups(t *testing.T) {
	s := newSelector(nil)
	groups := route.Groups("a", "b", "c")
	now := time.Unix(1000, 0)
	x, y := newPosition(), newPosition() // two subjects' round-robin positions
	s.failed("g0", now)
	s.succeeded("g1", 2*time.Second, now) // slow: avoided for a while
	for range 10 {
		if idx := s.pick(&x, groups, "", now); idx != 2 {
			t.Fatalf("picked %d, want the only healthy group 2", idx)
		}
	}
	// Everything avoided: the group whose avoidance ends first.
	if idx := s.pick(&x, groups, "g2", now); idx != 0 {
		t.Fatalf("fallback picked %d, want 0", idx)
	}
	later := now.Add(time.Minute)
	seen := map[int]bool{}
	for range 6 {
		seen[s.pick(&x, groups, "", later)] = true
	}
	if len(seen) != 3 {
		t.Fatalf("after avoidance ended, round-robin used %v", seen)
	}
	groups[1].State = route.Readonly
	for range 6 {
		if s.pick(&y, groups, "", later) == 1 {
			t.Fatal("picked a readonly group")
		}
	}
	// A fast answer clears a group and drops its record; a slow one
	// records it again.
	if !s.tracked("g1") {
		t.Fatal("a slow group has no record")
	}
	s.succeeded("g1", time.Millisecond, later)
	if s.tracked("g1") {
		t.Fatal("a fast answer left a record")
	}
	s.succeeded("g1", time.Second, later)
	if !s.tracked("g1") || s.pick(&y, route.Groups("a", "b")[1:], "", later) != 0 {
		t.Fatal("a slow answer was not recorded")
	}
}

// Send's direct path records a slow answer (the group is then avoided for a
// while) and clears it with the next fast one, without a lock when there is
// nothing to record.
func TestSend_DirectPathRecordsSlowAnswers(t *testing.T) {
	b := startFakeBroker(t)
	p := newProducer(t, WithBrokers(b.addr()))
	tracked := func() bool {
		p.sender.mu.Lock()
		defer p.sender.mu.Unlock()
		return p.sender.sel.tracked("g0")
	}
	send := func() {
		t.Helper()
		if err := p.Send(context.Background(), &Message{Subject: "s", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	send()
	if tracked() {
		t.Fatal("a fast answer left a record")
	}
	b.set(0, latencyLevels[0]+50*time.Millisecond)
	send()
	if !tracked() {
		t.Fatal("a slow answer was not recorded")
	}
	b.set(0, 0)
	send() // the only group: used even while avoided
	if tracked() {
		t.Fatal("a fast answer did not clear the record")
	}
}

// Concurrent Sends, some of which leave the direct path for the queued one
// (a readonly group answers them): every message is stored once with its
// own bytes, though Send encodes into buffers the next Send reuses.
func TestSend_ConcurrentSendsKeepTheirBytes(t *testing.T) {
	healthy, readonly := startFakeBroker(t), startFakeBroker(t)
	readonly.set(protocol.StatusReadonly, 0)
	p := newProducer(t, WithBrokers(healthy.addr(), readonly.addr()), WithSendTimeout(10*time.Second))
	const senders, each = 8, 100
	var wg sync.WaitGroup
	sent := make([][]*Message, senders)
	errs := make(chan error, senders)
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				m := &Message{Subject: "s", Body: fmt.Appendf(nil, "sender %d message %d %s", g, i, strings.Repeat("x", i))}
				if err := p.Send(context.Background(), m); err != nil {
					errs <- err
					return
				}
				sent[g] = append(sent[g], m)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if healthy.count() != senders*each || readonly.count() != 0 {
		t.Fatalf("healthy stored %d, readonly %d, want %d and 0", healthy.count(), readonly.count(), senders*each)
	}
	healthy.mu.Lock()
	defer healthy.mu.Unlock()
	for _, ms := range sent {
		for _, m := range ms {
			if got := healthy.stored[m.ID]; got == nil || !bytes.Equal(got.Body, m.Body) {
				t.Fatalf("message %s stored as %+v, sent with body %q", m.ID, got, m.Body)
			}
		}
	}
}

// SendChecked sends the caller's bytes as they are (same id, even when due
// later: the delay server forwards with it) and reports each outcome once.
func TestSendChecked_KeepsBytes(t *testing.T) {
	b := startFakeBroker(t)
	p := newProducer(t, WithBrokers(b.addr()))
	raw, err := protocol.AppendMessage(nil, &Message{Subject: "jobs", ID: "tmpl.1", Body: []byte("run"),
		DeliverAt: time.Now().Add(time.Hour)}, protocol.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	if err := p.SendChecked(raw, "jobs", "tmpl.1", func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !b.has("tmpl.1") || string(b.stored["tmpl.1"].Body) != "run" {
		t.Fatal("the broker did not store the message")
	}
	// Again: the broker answers that it has it, which is stored too.
	if err := p.SendChecked(raw, "jobs", "tmpl.1", func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("a duplicate: %v", err)
	}
}

// WithBusyLinger: lone messages go out at once while fewer requests than
// its bound are unanswered; past it, messages queued one by one wait in one
// batch, which goes out when the wait ends although no answer came.
func TestBusyLinger_BatchesWhileRequestsInFlight(t *testing.T) {
	b := startFakeBroker(t)
	hold := make(chan struct{})
	b.mu.Lock()
	b.hold = hold
	b.mu.Unlock()
	var release sync.Once
	defer release.Do(func() { close(hold) }) // a failed test's held answers
	const wait = 300 * time.Millisecond      // below the transport's request timeout
	p := newProducer(t, WithBrokers(b.addr()), WithBusyLinger(2, wait))
	var cbs sync.WaitGroup
	send := func(i int) {
		cbs.Add(1)
		if err := p.SendAsync(&Message{Subject: "jobs", Body: []byte(strconv.Itoa(i))}, func(_ *Message, err error) {
			if err != nil {
				t.Errorf("message %d: %v", i, err)
			}
			cbs.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	stored := func(n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for b.count() < n {
			if time.Now().After(deadline) {
				t.Fatalf("broker holds %d messages, want %d", b.count(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	send(0)
	stored(1) // nothing in flight: at once
	send(1)
	stored(2) // one in flight: at once
	start := time.Now()
	for i := 2; i < 22; i++ {
		send(i)
		time.Sleep(time.Millisecond)
	}
	if n := b.count(); n != 2 && time.Since(start) < wait {
		t.Fatalf("with two requests unanswered, %d messages reached the broker before the wait ended", n)
	}
	stored(22)
	b.mu.Lock()
	reqs := b.reqs
	b.mu.Unlock()
	if reqs != 3 {
		t.Fatalf("%d requests, want 3 (two lone messages, then one batch of 20)", reqs)
	}
	if since := time.Since(start); since < wait-50*time.Millisecond {
		t.Fatalf("the batch went out %v after its first message, before the wait (%v)", since, wait)
	}
	release.Do(func() { close(hold) })
	cbs.Wait()
}

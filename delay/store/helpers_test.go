package store

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/qmq-go/qmq/pkg/clock"
	"github.com/qmq-go/qmq/pkg/protocol"
)

var epoch = time.Date(2030, 3, 14, 10, 20, 0, 0, time.UTC)

// encode returns a message with id and due time (zero: none).
func encode(t testing.TB, id string, due time.Time) []byte {
	t.Helper()
	m := &protocol.Message{Subject: "orders", ID: id, Body: []byte("body of " + id), Created: epoch, DeliverAt: due}
	b, err := protocol.AppendMessage(nil, m, protocol.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func idOf(t testing.TB, msg []byte) string {
	v, err := protocol.ParseMessage(msg)
	if err != nil {
		t.Fatalf("fired message does not parse: %v", err)
	}
	return string(v.ID)
}

// harness is a store on a fake clock with a collector of due messages that
// marks each one dispatched (unless noMark) and fails the test on an early
// delivery.
type harness struct {
	t      testing.TB
	dir    string
	opts   Options
	clock  *clock.Fake
	store  *Store
	noMark bool

	mu       sync.Mutex
	received map[string]int
	order    []string
	unmarked []Ref
	done     chan struct{}
}

func newHarness(t testing.TB, dir string, opts Options, clk *clock.Fake) *harness {
	h := &harness{t: t, dir: dir, opts: opts, clock: clk, received: make(map[string]int)}
	h.open()
	t.Cleanup(func() { h.close() })
	return h
}

func (h *harness) open() {
	h.t.Helper()
	s, err := Open(h.dir, h.opts, h.clock, zaptest.NewLogger(h.t))
	if err != nil {
		h.t.Fatal(err)
	}
	h.store = s
	h.done = make(chan struct{})
	go h.collect(s, h.done)
}

func (h *harness) close() {
	if h.store == nil {
		return
	}
	if err := h.store.Close(); err != nil {
		h.t.Errorf("close: %v", err)
	}
	<-h.done
	h.store = nil
}

func (h *harness) reopen() {
	h.t.Helper()
	h.close()
	h.open()
}

func (h *harness) collect(s *Store, done chan struct{}) {
	defer close(done)
	for batch := range s.Due() {
		now := h.clock.Now().UnixMilli()
		refs := make([]Ref, 0, len(batch))
		h.mu.Lock()
		for _, d := range batch {
			if d.DueMillis > now {
				h.t.Errorf("message %s due %d delivered at %d: %d ms early", idOf(h.t, d.Message), d.DueMillis, now, d.DueMillis-now)
			}
			if got := dueOf(d.Message); got != d.DueMillis {
				h.t.Errorf("DueMillis %d, message says %d", d.DueMillis, got)
			}
			id := idOf(h.t, d.Message)
			h.received[id]++
			h.order = append(h.order, id)
			refs = append(refs, d.Ref)
		}
		noMark := h.noMark
		if noMark {
			h.unmarked = append(h.unmarked, refs...)
		}
		h.mu.Unlock()
		if !noMark {
			if err := s.MarkDispatched(refs); err != nil {
				h.t.Errorf("MarkDispatched: %v", err)
			}
		}
	}
}

func (h *harness) append(msgs ...[]byte) {
	h.t.Helper()
	for i, r := range h.store.AppendWait(msgs) {
		if r.Err != nil {
			h.t.Fatalf("append %d: %v", i, r.Err)
		}
	}
}

func (h *harness) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.order)
}

func (h *harness) times(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.received[id]
}

// waitCount polls until n deliveries have been seen.
func (h *harness) waitCount(n int) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for h.count() < n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			h.t.Logf("goroutines:\n%s", buf)
			h.t.Fatalf("received %d deliveries, want %d; %s", h.count(), n, h.summary())
		}
		time.Sleep(time.Millisecond)
	}
}

// settle gives the store's goroutines a moment to act on the current fake
// time; used only to check that nothing more arrives.
func (h *harness) settle() {
	for i := 0; i < 20; i++ {
		h.store.Sync()
		time.Sleep(time.Millisecond)
	}
}

func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s; %s", what, h.summary())
		}
		time.Sleep(time.Millisecond)
	}
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func encodeBody(id string, due time.Time, body []byte) ([]byte, error) {
	m := &protocol.Message{Subject: "orders", ID: id, Body: body, Created: epoch, DeliverAt: due}
	return protocol.AppendMessage(nil, m, protocol.DefaultLimits)
}

// summary describes the store's state in one line, without the hour list.
func (h *harness) summary() string {
	st := h.store.Stats()
	loaded := 0
	for _, hs := range st.Hours {
		if hs.Loaded {
			loaded++
		}
	}
	return fmt.Sprintf("timers %d, clock %s, pending %d in %d hours (%d loaded), in wheel %d, in flight %d, oldest %s, appended %d fired %d dispatched %d corrupt %d",
		h.clock.Timers(), h.clock.Now().Format(time.RFC3339Nano), st.Pending, len(st.Hours), loaded, st.InWheel, st.InFlight,
		st.OldestPending.Format(time.RFC3339Nano), st.Appended, st.Fired, st.Dispatched, st.Corrupt)
}

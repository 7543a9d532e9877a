package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/clock"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
)

func TestStore_FiresAtExactDueTime(t *testing.T) {
	clk := clock.NewFake(epoch)
	h := newHarness(t, t.TempDir(), Options{}, clk)
	h.append(
		encode(t, "a", epoch.Add(1234*time.Millisecond)),
		encode(t, "b", epoch.Add(1500*time.Millisecond)),
		encode(t, "now", time.Time{}),
		encode(t, "past", epoch.Add(-time.Hour)),
	)
	h.waitCount(2)
	if h.times("now") != 1 || h.times("past") != 1 {
		t.Fatalf("immediate messages not delivered: %v", h.received)
	}
	clk.Advance(1233 * time.Millisecond)
	h.settle()
	if h.count() != 2 {
		t.Fatalf("delivered %v before its time", h.order)
	}
	clk.Advance(time.Millisecond)
	h.waitCount(3)
	if h.order[2] != "a" {
		t.Fatalf("order %v", h.order)
	}
	clk.Advance(265 * time.Millisecond)
	h.settle()
	if h.count() != 3 {
		t.Fatalf("delivered %v early", h.order)
	}
	clk.Advance(time.Millisecond)
	h.waitCount(4)
	st := h.store.Stats()
	if st.Pending != 0 || st.InFlight != 0 || st.Appended != 4 || st.Dispatched != 4 {
		t.Fatalf("stats %+v", st)
	}
}

func TestStore_RejectsBadMessages(t *testing.T) {
	clk := clock.NewFake(epoch)
	opts := Options{Limits: protocol.DefaultLimits}
	opts.Limits.MaxBody = 100
	h := newHarness(t, t.TempDir(), opts, clk)
	good := encode(t, "good", epoch.Add(time.Second))
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)-1] ^= 0xff
	big, err := protocol.AppendMessage(nil, &protocol.Message{Subject: "s", ID: "big", Body: make([]byte, 200)}, protocol.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	huge := make([]byte, 10<<20)
	far := encode(t, "far", epoch.Add(DefaultHorizon+time.Minute))
	edge := encode(t, "edge", epoch.Add(DefaultHorizon))
	res := h.store.AppendWait([][]byte{good, corrupt, big, huge, far, []byte("junk"), edge})
	want := []error{nil, protocol.ErrInvalid, protocol.ErrTooLarge, protocol.ErrTooLarge, protocol.ErrBeyondHorizon, protocol.ErrInvalid, nil}
	for i, w := range want {
		if (w == nil) != (res[i].Err == nil) || (w != nil && !errors.Is(res[i].Err, w)) {
			t.Errorf("message %d: got %v, want %v", i, res[i].Err, w)
		}
	}
	t.Logf("beyond horizon: %v", res[4].Err)
	if got := protocol.StatusOf(res[4].Err); got != protocol.StatusBeyondHorizon {
		t.Errorf("status %v", got)
	}
	if err := h.store.Sync(); err != nil {
		t.Fatal(err)
	}
	st := h.store.Stats()
	if st.Appended != 2 || st.Rejected != 5 || st.Pending != 2 {
		t.Fatalf("stats %+v", st)
	}
	// Nothing rejected is ever delivered.
	clk.Advance(DefaultHorizon + time.Hour)
	h.waitCount(2)
	h.settle()
	if h.count() != 2 || h.times("good") != 1 || h.times("edge") != 1 {
		t.Fatalf("delivered %v", h.order)
	}
}

func TestStore_RestartRebuildsWheelMinusDispatched(t *testing.T) {
	for _, syncDispatch := range []bool{false, true} {
		t.Run(fmt.Sprintf("SyncDispatch=%v", syncDispatch), func(t *testing.T) {
			restartRebuilds(t, Options{SyncDispatch: syncDispatch})
		})
	}
}

func restartRebuilds(t *testing.T, opts Options) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	h := newHarness(t, dir, opts, clk)
	var msgs [][]byte
	for i, id := range ids("m", 300) {
		msgs = append(msgs, encode(t, id, epoch.Add(time.Duration(i)*time.Second)))
	}
	h.append(msgs...)
	clk.Advance(99 * time.Second)
	h.waitCount(100)
	h.reopen()
	h.settle()
	testutil.RequirePrivateTree(t, dir)
	if h.count() != 100 {
		t.Fatalf("after restart %d delivered, want 100 (dispatched ones came back?)", h.count())
	}
	clk.Advance(time.Hour)
	h.waitCount(300)
	h.settle()
	for _, id := range ids("m", 300) {
		if h.times(id) != 1 {
			t.Fatalf("%s delivered %d times", id, h.times(id))
		}
	}
}

func TestStore_PostponeHandsOutAgainLater(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	h := newHarness(t, dir, Options{}, clk)
	h.noMark = true
	h.appendDue("p", 3, epoch.Add(time.Second), 0)
	clk.Advance(time.Second)
	h.waitCount(3)
	h.mu.Lock()
	refs := h.unmarked
	h.unmarked = nil
	h.noMark = false
	h.mu.Unlock()
	h.store.Postpone(refs[:2], epoch.Add(11*time.Second)) // the broker is down
	if err := h.store.MarkDispatched(refs[2:]); err != nil {
		t.Fatal(err)
	}
	if st := h.store.Stats(); st.InWheel != 2 || st.InFlight != 0 || st.Pending != 2 {
		t.Fatalf("after Postpone: %s", h.summary())
	}
	clk.Advance(9999 * time.Millisecond)
	h.settle()
	if h.count() != 3 {
		t.Fatalf("postponed messages came back early: %v", h.order)
	}
	clk.Advance(time.Millisecond)
	h.waitCount(5)
	h.settle()
	for _, id := range ids("p", 2) {
		if h.times(id) != 2 {
			t.Fatalf("%s handed out %d times, want 2", id, h.times(id))
		}
	}
	h.reopen()
	h.settle()
	if h.count() != 5 {
		t.Fatalf("dispatched messages came back after a restart: %v", h.order)
	}
}

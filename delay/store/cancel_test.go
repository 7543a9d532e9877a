package store

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/clock"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// encodeKeyed returns a message of subject orders with a schedule key
// (none when key is empty).
func encodeKeyed(t testing.TB, id, key string, due time.Time) []byte {
	t.Helper()
	m := &protocol.Message{Subject: "orders", ID: id, Body: []byte("body of " + id), Created: epoch, DeliverAt: due}
	if key != "" {
		m.Properties = []protocol.Property{{Key: protocol.PropScheduleKey, Value: key}}
	}
	b, err := protocol.AppendMessage(nil, m, protocol.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func byKey(key string) protocol.ScheduleTarget {
	return protocol.ScheduleTarget{Subject: "orders", Key: key}
}

func byID(id string) protocol.ScheduleTarget {
	return protocol.ScheduleTarget{Subject: "orders", Key: id, ByID: true}
}

// cancelOne cancels one target and returns its result.
func (h *harness) cancelOne(t protocol.ScheduleTarget) error {
	return h.store.CancelWait([]protocol.ScheduleTarget{t})[0].Err
}

func wantErr(t *testing.T, what string, got, want error) {
	t.Helper()
	if want == nil && got != nil || want != nil && !errors.Is(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func TestCancel_EachAnswer(t *testing.T) {
	clk := clock.NewFake(epoch)
	h := newHarness(t, t.TempDir(), Options{}, clk)
	due := epoch.Add(10 * time.Minute)
	h.append(encodeKeyed(t, "k1", "order-1", due), encodeKeyed(t, "plain", "", due), encodeKeyed(t, "soon", "order-soon", epoch.Add(time.Second)))

	// Keys are unique among pending messages; the same message again is a
	// duplicate, not a second copy.
	rs := h.store.AppendWait([][]byte{encodeKeyed(t, "k1-other", "order-1", due), encodeKeyed(t, "k1", "order-1", due),
		encodeKeyed(t, "long", strings.Repeat("x", protocol.MaxScheduleKeyLen+1), due)})
	wantErr(t, "second message with a pending key", rs[0].Err, protocol.ErrKeyExists)
	wantErr(t, "same message again", rs[1].Err, protocol.ErrDuplicate)
	wantErr(t, "key too long", rs[2].Err, protocol.ErrInvalid)

	wantErr(t, "cancel by key", h.cancelOne(byKey("order-1")), nil)
	wantErr(t, "cancel again (a retry)", h.cancelOne(byKey("order-1")), nil)
	wantErr(t, "cancel by id of the cancelled one", h.cancelOne(byID("k1")), nil)
	wantErr(t, "cancel by id", h.cancelOne(byID("plain")), nil)
	wantErr(t, "unknown key", h.cancelOne(byKey("nope")), protocol.ErrNotFound)
	wantErr(t, "unknown id", h.cancelOne(byID("nope")), protocol.ErrNotFound)
	wantErr(t, "other subject", h.cancelOne(protocol.ScheduleTarget{Subject: "payments", Key: "order-1"}), protocol.ErrNotFound)
	wantErr(t, "empty key", h.cancelOne(byKey("")), protocol.ErrInvalid)
	wantErr(t, "bad subject", h.cancelOne(protocol.ScheduleTarget{Subject: "bad subject!", Key: "k"}), protocol.ErrInvalid)

	// The key of a cancelled message is free again.
	h.append(encodeKeyed(t, "k1-again", "order-1", due))

	clk.Advance(time.Second)
	h.waitCount(1)
	wantErr(t, "cancel after firing", h.cancelOne(byKey("order-soon")), protocol.ErrAlreadyFired)
	wantErr(t, "cancel after firing, by id", h.cancelOne(byID("soon")), protocol.ErrAlreadyFired)
	// A fired key is free again.
	h.append(encodeKeyed(t, "soon-2", "order-soon", due))

	clk.Advance(10 * time.Minute)
	h.waitCount(3)
	h.settle()
	for id, want := range map[string]int{"k1": 0, "plain": 0, "soon": 1, "k1-again": 1, "soon-2": 1, "k1-other": 0} {
		if got := h.times(id); got != want {
			t.Fatalf("%s delivered %d times, want %d (%v)", id, got, want, h.order)
		}
	}
	st := h.store.Stats()
	if st.Pending != 0 {
		t.Fatalf("cancelled messages still count as pending: %+v", st)
	}
}

// TestCancel_RaceWithFiring cancels half of 4,000 messages due within the
// same few milliseconds while the clock passes their due time: every
// message answered cancelled never comes out, every one answered already
// fired does, and the rest come out too.
func TestCancel_RaceWithFiring(t *testing.T) {
	clk := clock.NewFake(epoch)
	h := newHarness(t, t.TempDir(), Options{}, clk)
	const n = 4000
	var msgs [][]byte
	for i := 0; i < n; i++ {
		msgs = append(msgs, encodeKeyed(t, fmt.Sprintf("m%d", i), fmt.Sprintf("key%d", i), epoch.Add(time.Second+time.Duration(i%4)*time.Millisecond)))
	}
	h.append(msgs...)
	answers := make([]error, n)
	var wg sync.WaitGroup
	var answered atomic.Int64
	clk.Advance(time.Second - 2*time.Millisecond)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w * 2; i < n; i += 8 { // even messages, one per request
				answers[i] = h.cancelOne(byKey(fmt.Sprintf("key%d", i)))
				answered.Add(1)
			}
		}(w)
	}
	// The clock reaches the due times while the cancels are under way.
	h.waitFor("a fifth of the cancels", func() bool { return answered.Load() >= n/10 })
	for step := 0; step < 6; step++ {
		clk.Advance(time.Millisecond)
		time.Sleep(2 * time.Millisecond)
	}
	wg.Wait()
	cancelled, fired := 0, 0
	for i := 0; i < n; i += 2 {
		switch {
		case answers[i] == nil:
			cancelled++
		case errors.Is(answers[i], protocol.ErrAlreadyFired):
			fired++
		default:
			t.Fatalf("cancel of m%d: %v", i, answers[i])
		}
	}
	h.waitCount(n - cancelled)
	h.settle()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("m%d", i)
		want := 1
		if i%2 == 0 && answers[i] == nil {
			want = 0
		}
		if got := h.times(id); got != want {
			t.Fatalf("%s (answer %v) delivered %d times, want %d", id, answers[i], got, want)
		}
	}
	t.Logf("cancelled %d, already fired %d", cancelled, fired)
	if cancelled == 0 || fired == 0 {
		t.Logf("the race was not exercised both ways this time (cancelled %d, fired %d)", cancelled, fired)
	}
}

// TestCancel_SurvivesRestart: cancels are in the message log and then in
// the dispatch logs; a restart (with or without a checkpoint past them)
// keeps them, and answers a second cancel "cancelled" again.
func TestCancel_SurvivesRestart(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	h := newHarness(t, dir, Options{}, clk)
	var msgs [][]byte
	for i := 0; i < 100; i++ {
		msgs = append(msgs, encodeKeyed(t, fmt.Sprintf("m%d", i), fmt.Sprintf("key%d", i), epoch.Add(time.Duration(i)*time.Minute+time.Second)))
	}
	h.append(msgs...)
	var targets []protocol.ScheduleTarget
	for i := 0; i < 100; i += 3 {
		targets = append(targets, byKey(fmt.Sprintf("key%d", i)))
	}
	for i, r := range h.store.CancelWait(targets) {
		if r.Err != nil {
			t.Fatalf("cancel %v: %v", targets[i], r.Err)
		}
	}
	h.reopen()
	wantErr(t, "cancel again after the restart", h.cancelOne(byKey("key0")), nil)
	wantErr(t, "cancel by id after the restart", h.cancelOne(byID("m3")), nil)
	h.append(encodeKeyed(t, "reuse", "key6", epoch.Add(time.Hour)))
	rs := h.store.AppendWait([][]byte{encodeKeyed(t, "dup", "key7", epoch.Add(time.Hour))})
	wantErr(t, "a pending key after the restart", rs[0].Err, protocol.ErrKeyExists)
	clk.Advance(2 * time.Hour)
	h.waitCount(100 - len(targets) + 1)
	h.reopen()
	clk.Advance(time.Hour)
	h.settle()
	for i := 0; i < 100; i++ {
		want := 1
		if i%3 == 0 {
			want = 0
		}
		if got := h.times(fmt.Sprintf("m%d", i)); got != want {
			t.Fatalf("m%d delivered %d times, want %d", i, got, want)
		}
	}
}

func TestReschedule_EachAnswer(t *testing.T) {
	clk := clock.NewFake(epoch)
	h := newHarness(t, t.TempDir(), Options{}, clk)
	h.append(encodeKeyed(t, "earlier", "k-earlier", epoch.Add(10*time.Minute)),
		encodeKeyed(t, "later", "k-later", epoch.Add(5*time.Minute)),
		encodeKeyed(t, "by-id", "", epoch.Add(5*time.Minute)),
		encodeKeyed(t, "soon", "k-soon", epoch.Add(time.Second)))
	resched := func(tg protocol.ScheduleTarget, at time.Time) error {
		return h.store.RescheduleWait([]protocol.ScheduleTarget{tg}, []int64{at.UnixMilli()})[0].Err
	}
	wantErr(t, "reschedule earlier", resched(byKey("k-earlier"), epoch.Add(time.Minute)), nil)
	wantErr(t, "reschedule later", resched(byKey("k-later"), epoch.Add(20*time.Minute)), nil)
	wantErr(t, "reschedule by id", resched(byID("by-id"), epoch.Add(30*time.Minute)), nil)
	wantErr(t, "reschedule the rescheduled one again", resched(byKey("k-later"), epoch.Add(25*time.Minute)), nil)
	wantErr(t, "into the past", resched(byKey("k-later"), epoch.Add(-time.Second)), protocol.ErrInvalid)
	wantErr(t, "beyond the horizon", resched(byKey("k-later"), epoch.Add(3*365*24*time.Hour)), protocol.ErrBeyondHorizon)
	wantErr(t, "unknown key", resched(byKey("nope"), epoch.Add(time.Hour)), protocol.ErrNotFound)
	rs := h.store.AppendWait([][]byte{encodeKeyed(t, "other", "k-later", epoch.Add(time.Hour))})
	wantErr(t, "the rescheduled key is still pending", rs[0].Err, protocol.ErrKeyExists)

	clk.Advance(time.Second)
	h.waitCount(1)
	wantErr(t, "reschedule after firing", resched(byKey("k-soon"), epoch.Add(time.Hour)), protocol.ErrAlreadyFired)

	clk.Advance(time.Minute - time.Second - time.Millisecond)
	h.settle()
	if h.times("earlier") != 0 {
		t.Fatalf("rescheduled message came before its new time")
	}
	clk.Advance(time.Millisecond)
	h.waitCount(2)

	h.reopen()                    // the reschedules are in the message log and the hour files
	clk.Advance(10 * time.Minute) // past the old times of "later" and "by-id"
	h.settle()
	if h.times("later") != 0 || h.times("by-id") != 0 || h.times("earlier") != 1 {
		t.Fatalf("a message came at its old time: %v", h.received)
	}
	wantErr(t, "cancel of the rescheduled message", h.cancelOne(byID("by-id")), nil)
	clk.Advance(20 * time.Minute)
	h.waitCount(3)
	h.settle()
	for id, want := range map[string]int{"earlier": 1, "later": 1, "by-id": 0, "soon": 1, "other": 0} {
		if got := h.times(id); got != want {
			t.Fatalf("%s delivered %d times, want %d (%v)", id, got, want, h.order)
		}
	}
	if st := h.store.Stats(); st.Pending != 0 {
		t.Fatalf("pending after everything came out: %+v", st)
	}
}

// A keyed message marked replace takes the place of the pending one with
// its key in one record: the old one never comes out, also after a
// restart; with nothing pending it is stored as usual.
func TestAppend_ReplaceByKey(t *testing.T) {
	clk := clock.NewFake(epoch)
	h := newHarness(t, t.TempDir(), Options{}, clk)
	replacing := func(id, key string, due time.Time) []byte {
		m := &protocol.Message{Subject: "orders", ID: id, Body: []byte(id), Created: epoch, DeliverAt: due,
			Properties: []protocol.Property{{Key: protocol.PropScheduleKey, Value: key}, {Key: protocol.PropScheduleReplace, Value: "1"}}}
		b, err := protocol.AppendMessage(nil, m, protocol.DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	h.append(encodeKeyed(t, "old", "k", epoch.Add(10*time.Minute)))
	rs := h.store.AppendWait([][]byte{replacing("new", "k", epoch.Add(5*time.Minute))})
	if rs[0].Err != nil && !errors.Is(rs[0].Err, protocol.ErrRetryLater) {
		t.Fatalf("replace right after the first append: %v, want stored or retry later", rs[0].Err)
	}
	if rs[0].Err != nil {
		h.store.Sync() // the replay has indexed "old" after this
		h.append(replacing("new", "k", epoch.Add(5*time.Minute)))
	}
	h.append(replacing("fresh", "k2", epoch.Add(5*time.Minute))) // nothing to replace
	h.store.Sync()
	rs = h.store.AppendWait([][]byte{encodeKeyed(t, "third", "k", epoch.Add(time.Minute))})
	wantErr(t, "without replace the key is taken", rs[0].Err, protocol.ErrKeyExists)
	wantErr(t, "cancel of the replaced one by id", h.cancelOne(byID("old")), nil)
	h.reopen()
	clk.Advance(20 * time.Minute)
	h.waitCount(2)
	h.settle()
	for id, want := range map[string]int{"old": 0, "new": 1, "fresh": 1, "third": 0} {
		if got := h.times(id); got != want {
			t.Fatalf("%s delivered %d times, want %d (%v)", id, got, want, h.order)
		}
	}
}

// A store too large to index before Open returns indexes beside the other
// loops: cancels wait for it, keyed appends answer retry later until it is
// done, and the answers are the same as with the index built at once.
func TestCancel_IndexBuiltAfterOpen(t *testing.T) {
	old := syncIndexBytes
	syncIndexBytes = 0
	defer func() { syncIndexBytes = old }()
	clk := clock.NewFake(epoch)
	h := newHarness(t, t.TempDir(), Options{}, clk)
	var msgs [][]byte
	for i := 0; i < 2000; i++ {
		msgs = append(msgs, encodeKeyed(t, fmt.Sprint("m", i), fmt.Sprint("k", i), epoch.Add(time.Hour+time.Duration(i)*time.Second)))
	}
	h.append(msgs...)
	wantErr(t, "cancel before the restart", h.cancelOne(byKey("k1")), nil)
	h.reopen()
	wantErr(t, "cancel by key after the restart", h.cancelOne(byKey("k2")), nil)
	wantErr(t, "cancel by id after the restart", h.cancelOne(byID("m3")), nil)
	wantErr(t, "cancelled before the restart", h.cancelOne(byKey("k1")), nil)
	h.waitFor("keyed appends taken", func() bool {
		err := h.store.AppendWait([][]byte{encodeKeyed(t, "dup", "k4", epoch.Add(time.Hour))})[0].Err
		if errors.Is(err, protocol.ErrRetryLater) {
			return false
		}
		wantErr(t, "a pending key after the restart", err, protocol.ErrKeyExists)
		return true
	})
	clk.Advance(3 * time.Hour)
	h.waitCount(2000 - 3)
	h.settle()
	for _, id := range []string{"m1", "m2", "m3", "dup"} {
		if h.times(id) != 0 {
			t.Fatalf("%s delivered", id)
		}
	}
}

// After a restart the index is rebuilt hour by hour; a key belongs to its
// latest append (the rescheduled record), whichever hour holds it.
func TestReschedule_KeyAfterRestartIsTheNewRecord(t *testing.T) {
	clk := clock.NewFake(epoch)
	h := newHarness(t, t.TempDir(), Options{}, clk)
	h.append(encodeKeyed(t, "earlier", "k-earlier", epoch.Add(3*time.Hour)), encodeKeyed(t, "later", "k-later", epoch.Add(10*time.Minute)))
	for key, at := range map[string]time.Time{"k-earlier": epoch.Add(10 * time.Minute), "k-later": epoch.Add(3 * time.Hour)} {
		if r := h.store.RescheduleWait([]protocol.ScheduleTarget{byKey(key)}, []int64{at.UnixMilli()}); r[0].Err != nil {
			t.Fatal(r[0].Err)
		}
	}
	h.reopen()
	wantErr(t, "cancel the rescheduled message by key", h.cancelOne(byKey("k-earlier")), nil)
	wantErr(t, "cancel the other rescheduled message by key", h.cancelOne(byKey("k-later")), nil)
	clk.Advance(4 * time.Hour)
	h.settle()
	if h.count() != 0 {
		t.Fatalf("delivered %v: a cancel by key hit the old record", h.order)
	}
}

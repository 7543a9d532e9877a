package store

import (
	"math/rand"
	"sort"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/clock"
)

// TestPrecision_NeverEarlyAlwaysOnTime walks a fake clock forward in random
// steps over messages with random due times (some in the past, some at the
// same millisecond, some straddling an hour boundary). After each step it
// waits until exactly the messages due by then have come out: the harness
// fails on any delivery whose due time is after the clock, and the wait
// fails if one that is due does not come out while the clock stands still
// (so firing happens at the due time itself, not at a later tick).
func TestPrecision_NeverEarlyAlwaysOnTime(t *testing.T) {
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d", seed)
	start := time.Date(2030, 3, 14, 10, 59, 50, 0, time.UTC) // an hour boundary 10 s ahead
	clk := clock.NewFake(start)
	for _, flush := range []FlushMode{FlushSync, FlushAsync} {
		t.Run(string(flush), func(t *testing.T) {
			clk.Set(start)
			h := newHarness(t, t.TempDir(), Options{Flush: flush, FlushInterval: time.Millisecond}, clk)
			n := 600
			dues := make([]int64, n)
			msgs := make([][]byte, n)
			for i, id := range ids("p", n) {
				due := start.Add(time.Duration(rng.Intn(25_000)-2_000) * time.Millisecond)
				if i%50 == 0 {
					due = start.Add(7 * time.Second) // many at the same millisecond
				}
				dues[i] = due.UnixMilli()
				msgs[i] = encode(t, id, due)
			}
			h.append(msgs...)
			sorted := append([]int64(nil), dues...)
			sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
			now := start
			for now.Before(start.Add(25 * time.Second)) {
				due := sort.Search(len(sorted), func(i int) bool { return sorted[i] > now.UnixMilli() })
				h.waitCount(due)
				if h.count() > due {
					t.Fatalf("seed %d: %d delivered by %v, only %d due", seed, h.count(), now, due)
				}
				now = now.Add(time.Duration(1+rng.Intn(700)) * time.Millisecond)
				clk.Set(now)
			}
			h.waitCount(n)
			h.settle()
			h.expectOnce("p", n)
			if st := h.store.Stats(); st.Pending != 0 || st.InFlight != 0 || !st.OldestPending.IsZero() {
				t.Fatalf("after all delivered: %s", h.summary())
			}
		})
	}
}

func TestStats_PendingPerHourAndOldest(t *testing.T) {
	clk := clock.NewFake(epoch)
	h := newHarness(t, t.TempDir(), Options{}, clk)
	h.noMark = true
	h.appendDue("soon", 3, epoch.Add(time.Second), time.Second)
	h.appendDue("later", 5, epoch.Add(5*time.Hour), time.Minute)
	if err := h.store.Sync(); err != nil {
		t.Fatal(err)
	}
	st := h.store.Stats()
	if st.Pending != 8 || len(st.Hours) != 2 || st.InWheel != 3 || !st.OldestPending.Equal(epoch.Add(time.Second)) {
		t.Fatalf("before firing: %+v", st)
	}
	if st.Hours[1].Hour != epoch.Add(5*time.Hour).Truncate(time.Hour) || st.Hours[1].Pending() != 5 || st.Hours[1].Loaded {
		t.Fatalf("hour stats %+v", st.Hours[1])
	}
	clk.Advance(2 * time.Second)
	h.waitCount(2)
	st = h.store.Stats()
	if st.InFlight != 2 || st.InWheel != 1 || !st.OldestPending.Equal(epoch.Add(time.Second)) || st.Pending != 8 {
		t.Fatalf("two in flight: %+v", st)
	}
	h.mu.Lock()
	refs := h.unmarked
	h.mu.Unlock()
	if err := h.store.MarkDispatched(refs); err != nil {
		t.Fatal(err)
	}
	st = h.store.Stats()
	if st.InFlight != 0 || st.Pending != 6 || !st.OldestPending.Equal(epoch.Add(3*time.Second)) {
		t.Fatalf("after marking: %+v", st)
	}
}

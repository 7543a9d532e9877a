package store

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/clock"
	"github.com/qmq-go/qmq/pkg/testutil"
)

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// TestHorizon_YearsAheadThousandsOfHourFiles spreads messages over two years
// (one hour file each), checks that only the hours within the window are in
// memory and only a bounded number of files is open, restarts, and then
// walks the fake clock to every due time: each message comes out exactly at
// its time, once.
func TestHorizon_YearsAheadThousandsOfHourFiles(t *testing.T) {
	hours := 3000
	if testing.Short() {
		hours = 300
	}
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	h := newHarness(t, dir, Options{MaxOpenFiles: 8}, clk)
	rng := rand.New(rand.NewSource(7))
	span := int64(DefaultHorizon/time.Hour) - 2
	perm := rng.Perm(int(span))[:hours]
	dues := make([]time.Time, hours)
	msgs := make([][]byte, hours)
	for i, id := range ids("y", hours) {
		// One message per chosen hour, at a random millisecond in it.
		dues[i] = epoch.Truncate(time.Hour).Add(time.Duration(perm[i]+1)*time.Hour + time.Duration(rng.Int63n(int64(time.Hour/time.Millisecond)))*time.Millisecond)
		msgs[i] = encode(t, id, dues[i])
	}
	fds := openFDs(t)
	for i := 0; i < hours; i += 500 {
		h.append(msgs[i:min(i+500, hours)]...)
	}
	if err := h.store.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := openFDs(t); got > fds+2*8+4 {
		t.Fatalf("%d open files after writing %d hour files (before: %d)", got, hours, fds)
	}
	st := h.store.Stats()
	if st.Pending != int64(hours) || len(st.Hours) != hours {
		t.Fatalf("pending %d in %d hours, want %d", st.Pending, len(st.Hours), hours)
	}
	if st.InWheel > 2 {
		t.Fatalf("%d entries in the wheel; only the window should be loaded", st.InWheel)
	}
	start := time.Now()
	h.reopen()
	t.Logf("reopen with %d hour files took %v", hours, time.Since(start))
	ents, _ := os.ReadDir(filepath.Join(dir, scheduleDir))
	if len(ents) != hours {
		t.Fatalf("%d schedule files, want %d", len(ents), hours)
	}

	order := make([]int, hours)
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return dues[order[a]].Before(dues[order[b]]) })
	for n, i := range order {
		clk.Set(dues[i].Add(-time.Millisecond))
		if n%50 == 0 {
			h.settle()
		}
		if h.count() != n {
			t.Fatalf("message %d delivered early: %d delivered before %v", i, h.count(), dues[i])
		}
		clk.Set(dues[i])
		h.waitCount(n + 1)
		if got := h.order[n]; got != ids("y", hours)[i] {
			t.Fatalf("delivery %d is %s, want y-%d", n, got, i)
		}
	}
	h.expectOnce("y", hours)
	// The last delivery is counted when its handler runs; the store marks
	// it dispatched just after: poll.
	testutil.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if st := h.store.Stats(); st.InWheel != 0 || st.Pending != 0 {
			return fmt.Errorf("after all fired: %s", h.summary())
		}
		return nil
	})
}

func TestClock_JumpBackNeverEarly(t *testing.T) {
	clk := clock.NewFake(epoch)
	h := newHarness(t, t.TempDir(), Options{}, clk)
	due := epoch.Add(10 * time.Second)
	h.append(encode(t, "a", due), encode(t, "b", due.Add(time.Hour)))
	clk.Set(epoch.Add(-24 * time.Hour)) // the wall clock is set back a day
	clk.Advance(time.Second)            // the fire loop's tick timer runs
	h.settle()
	clk.Set(due.Add(-time.Millisecond))
	h.settle()
	if h.count() != 0 {
		t.Fatalf("delivered %v after a clock jump back", h.order)
	}
	clk.Set(due)
	h.waitCount(1)
	// Forward jump by a day: everything due fires at once.
	clk.Set(due.Add(24 * time.Hour))
	h.waitCount(2)
	h.expectOnce("a", 0)
}

func TestRetention_RemovesDispatchedHoursAndTrimsLog(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	h := newHarness(t, dir, Options{SegmentSize: 1 << 20}, clk)
	body := make([]byte, 100<<10)
	var msgs [][]byte
	for i, id := range ids("r", 40) {
		m, err := encodeBody(id, epoch.Add(time.Duration(i)*5*time.Minute), body)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	h.append(msgs...)                                  // hours 10 to 13
	h.appendDue("keep", 1, epoch.Add(10*time.Hour), 0) // hour 20
	h.appendDue("wait", 1, epoch.Add(40*time.Hour), 0) // not due yet
	clk.Advance(4 * time.Hour)
	h.waitCount(40)
	if err := h.store.Sync(); err != nil {
		t.Fatal(err)
	}
	files := func(sub string) int {
		ents, _ := os.ReadDir(filepath.Join(dir, sub))
		return len(ents)
	}
	if n := files(scheduleDir); n != 6 {
		t.Fatalf("%d schedule files before retention, want 6", n)
	}
	// Hours 10 to 13 end by 14:00; with the default Keep of 24h they go
	// after 14:00 the next day. Hour 20 stays until 21:00 the next day.
	clk.Advance(24 * time.Hour)
	h.waitCount(41)
	h.waitFor("retention", func() bool { return files(scheduleDir) == 2 && files(dispatchDir) == 1 })
	segs := logBases(t, dir)
	if len(segs) != 1 {
		t.Fatalf("message log not trimmed: %v", segs)
	}
	h.reopen()
	clk.Advance(24 * time.Hour)
	h.waitCount(42)
	h.settle()
	h.expectOnce("r", 40)
	h.expectOnce("keep", 1)
	h.expectOnce("wait", 1)
	h.waitFor("retention of hour 20", func() bool { return files(scheduleDir) == 1 })
}

// TestBacklog_StreamsPastHoursThroughTheWheel restarts after a long
// downtime with many ended hours pending: they are loaded as the wheel
// drains, never more than MaxBacklog at once (plus one hour), and all come
// out once.
func TestBacklog_StreamsPastHoursThroughTheWheel(t *testing.T) {
	clk := clock.NewFake(epoch)
	dir := t.TempDir()
	h := newHarness(t, dir, Options{}, clk)
	h.appendDue("b", 400, epoch.Add(2*time.Hour), 10*time.Minute) // 40 hours, 6 an hour
	h.close()
	clk.Advance(100 * time.Hour)
	// Nobody reads Due at first: the fire loop holds one batch of one
	// message and the rest stays in the wheel.
	s, err := Open(dir, Options{MaxBacklog: 50, FireBatch: 1, DueQueue: 1}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	deadline := time.Now().Add(20 * time.Second)
	for s.Stats().InWheel < 50 {
		if time.Now().After(deadline) {
			t.Fatalf("backlog not loaded: %+v", s.Stats().InWheel)
		}
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < 5; i++ {
		clk.Advance(time.Second) // the indexer looks again
		s.Sync()
	}
	if n := s.Stats().InWheel; n > 50+6 {
		t.Fatalf("%d entries in the wheel at once, MaxBacklog 50", n)
	}
	seen := make(map[string]int)
	for len(seen) < 400 {
		select {
		case batch := <-s.Due():
			for _, d := range batch {
				seen[idOf(t, d.Message)]++
				if err := s.MarkDispatched([]Ref{d.Ref}); err != nil {
					t.Fatal(err)
				}
			}
		case <-time.After(time.Millisecond):
			clk.Advance(time.Second)
		}
		if time.Now().After(deadline) {
			t.Fatalf("backlog not drained: %d of 400 out", len(seen))
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("%s came out %d times", id, n)
		}
	}
}

package store

import (
	"sort"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/clock"
)

// TestWindow_WheelHoldsOnlyTheWindow spreads messages over three hours and
// walks the clock through them: at every step the wheel holds only messages
// due within the window (and at least those due within Window-loadStep),
// and every message comes out once, on time.
func TestWindow_WheelHoldsOnlyTheWindow(t *testing.T) {
	clk := clock.NewFake(epoch)
	h := newHarness(t, t.TempDir(), Options{}, clk)
	window := 30 * time.Minute
	step := window / 6
	n := 1080
	dues := make([]time.Time, n)
	var msgs [][]byte
	for i, id := range ids("w", n) {
		dues[i] = epoch.Add(time.Duration(i) * 10 * time.Second).Add(7 * time.Millisecond)
		msgs = append(msgs, encode(t, id, dues[i]))
	}
	// Appended in a shuffled order, as producers would.
	order := make([]int, n)
	for i := range order {
		order[i] = (i * 7919) % n
	}
	for k := 0; k < n; k += 100 {
		var b [][]byte
		for _, i := range order[k:min(k+100, n)] {
			b = append(b, msgs[i])
		}
		h.append(b...)
	}
	count := func(from, to time.Time) int { // dues in (from, to]
		a := sort.Search(n, func(i int) bool { return dues[i].After(from) })
		b := sort.Search(n, func(i int) bool { return dues[i].After(to) })
		return b - a
	}
	for now := epoch; now.Before(epoch.Add(3*time.Hour + time.Minute)); now = now.Add(37 * time.Second) {
		clk.Set(now)
		h.waitCount(count(epoch.Add(-time.Hour), now))
		if err := h.store.Sync(); err != nil {
			t.Fatal(err)
		}
		in := h.store.Stats().InWheel
		most, least := count(now, now.Add(window)), count(now, now.Add(window-step))
		if in > most || in < least {
			t.Fatalf("at %v the wheel holds %d entries; due within the window: %d, within Window-step: %d",
				now.Format(time.TimeOnly), in, most, least)
		}
	}
	h.waitCount(n)
	h.settle()
	h.expectOnce("w", n)
}

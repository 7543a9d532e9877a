package jitter

import (
	"testing"
	"time"
)

// TestNth_ExponentialWithJitterWithinBounds: the n-th wait lies within half
// and one and a half times Min·2^(n-1), never above Max, and waits of the
// same n differ (they are jittered).
func TestNth_ExponentialWithJitterWithinBounds(t *testing.T) {
	lo, hi := 100*time.Millisecond, 10*time.Second
	for n := 1; n <= 20; n++ {
		base := min(lo<<min(n-1, 30), hi)
		seen := map[time.Duration]bool{}
		for range 200 {
			d := Nth(lo, hi, n)
			if d < base/2 || d > min(base*3/2, hi) {
				t.Fatalf("Nth(%d) = %v, want within [%v, %v]", n, d, base/2, min(base*3/2, hi))
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Fatalf("Nth(%d): only %d distinct waits in 200: no jitter", n, len(seen))
		}
	}
	if d := Nth(lo, hi, 0); d < lo/2 || d > lo*3/2 {
		t.Fatalf("Nth(0) = %v, want the first wait", d)
	}
}

// TestBackoff_ResetStartsOver: Next grows to Max; after Reset it is back
// near Min.
func TestBackoff_ResetStartsOver(t *testing.T) {
	b := New(10*time.Millisecond, time.Second)
	var d time.Duration
	for range 20 {
		d = b.Next()
	}
	if d < 500*time.Millisecond || d > time.Second {
		t.Fatalf("after 20 failures the wait is %v, want within [500ms, 1s]", d)
	}
	b.Reset()
	if d := b.Next(); d > 15*time.Millisecond {
		t.Fatalf("after Reset the wait is %v, want about 10ms", d)
	}
}

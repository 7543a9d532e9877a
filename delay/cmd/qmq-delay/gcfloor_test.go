package main

import "testing"

func TestGCFloorPercent(t *testing.T) {
	g := &gcFloor{percent: 25, floor: 64 << 20}
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 10_000},
		{1 << 10, 10_000},        // a tiny heap: capped
		{16 << 20, 400},          // 64 MiB over 16 MiB live
		{256 << 20, 25},          // the floor is a quarter: GOGC itself
		{1 << 30, 25},            // a big heap: GOGC itself
		{(64 << 20) / 50, 5_000}, // just under the cap
	} {
		if got := g.percentFor(c.live); got != c.want {
			t.Errorf("live %d: percent %d, want %d", c.live, got, c.want)
		}
	}
}

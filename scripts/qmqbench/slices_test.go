package main

import (
	"fmt"
	"testing"
)

func TestSliceOrderThreeSetupsGoThroughEveryOrder(t *testing.T) {
	seen := map[string]bool{}
	first := map[int]int{}
	for r := range 6 {
		o := sliceOrder(r, 3)
		seen[fmt.Sprint(o)] = true
		first[o[0]]++
	}
	if len(seen) != 6 {
		t.Fatalf("six rounds gave %d distinct orders: %v", len(seen), seen)
	}
	for s := range 3 {
		if first[s] != 2 {
			t.Fatalf("setup %d first in %d of six rounds, want 2", s, first[s])
		}
	}
}

func TestSliceOrderTwoSetupsAlternate(t *testing.T) {
	for r := range 4 {
		if o := sliceOrder(r, 2); o[0] != 0 || o[1] != 1 {
			t.Fatalf("round %d: %v, want [0 1]", r, o)
		}
	}
}

func TestSlicesResultRatesAndRoundRatios(t *testing.T) {
	r := slicesResult{Messages: []int64{100, 90}, Seconds: []float64{1, 1},
		Rounds: [][]float64{{100, 110}, {100, 80}, {0, 5}}}
	if r.rate(0) != 100 || r.rate(1) != 90 {
		t.Fatalf("rates %v %v", r.rate(0), r.rate(1))
	}
	got := r.roundRatios(0, 1)
	if len(got) != 2 || got[0] != 0.8 || got[1] != 1.1 {
		t.Fatalf("round ratios %v, want [0.8 1.1] (a round where the first setup made nothing is left out)", got)
	}
}

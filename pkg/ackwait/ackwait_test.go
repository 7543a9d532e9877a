package ackwait

import (
	"errors"
	"testing"
	"time"
)

func TestWaiters_CompleteInOrderOfNeed(t *testing.T) {
	var w Waiters
	var got []int
	add := func(need int64, id int) { w.Add(need, func(error) { got = append(got, id) }) }
	add(30, 1)
	add(10, 2)
	add(20, 3)
	add(10, 4) // same need as 2: after it
	run := func(fs []func(error)) {
		for _, f := range fs {
			f(nil)
		}
	}
	if fs := w.TakeUpTo(9); fs != nil {
		t.Fatalf("took %d below every need", len(fs))
	}
	run(w.TakeUpTo(20))
	if len(got) != 3 || got[0] != 2 || got[1] != 4 || got[2] != 3 || w.Len() != 1 {
		t.Fatalf("completed %v, %d left; want [2 4 3], 1 left", got, w.Len())
	}
	var err error
	for _, f := range w.TakeAll() {
		f(errors.New("closed"))
		err = errors.New("closed")
	}
	if err == nil || w.Len() != 0 || len(got) != 4 || got[3] != 1 {
		t.Fatalf("TakeAll: completed %v, %d left", got, w.Len())
	}
}

func TestLag_AgeOfTheOldestUnacknowledgedEnd(t *testing.T) {
	var l Lag
	t0 := time.Unix(1000, 0)
	if l.Age(t0) != 0 {
		t.Fatal("empty lag has an age")
	}
	l.Sample(100, 50, t0)
	l.Sample(100, 50, t0.Add(time.Second)) // same end: not a new sample
	l.Sample(200, 50, t0.Add(2*time.Second))
	if a := l.Age(t0.Add(3 * time.Second)); a != 3*time.Second {
		t.Fatalf("age %v, want 3s (the end 100 sampled at t0)", a)
	}
	l.Acknowledged(100)
	if a := l.Age(t0.Add(3 * time.Second)); a != time.Second {
		t.Fatalf("age after acknowledging 100: %v, want 1s", a)
	}
	l.Sample(300, 300, t0.Add(4*time.Second)) // the slave holds it all
	if l.Age(t0.Add(5*time.Second)) != 0 {
		t.Fatal("a slave holding the end still lags")
	}
	// Bounded: the oldest survives thinning.
	for i := range 3 * maxSamples {
		l.Sample(int64(1000+i), 0, t0.Add(time.Duration(i)*time.Millisecond))
	}
	if len(l.samples) > maxSamples || l.samples[0].end != 1000 {
		t.Fatalf("%d samples, oldest end %d; want ≤ %d and 1000", len(l.samples), l.samples[0].end, maxSamples)
	}
}

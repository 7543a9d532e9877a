package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a Clock that moves only when told to. It is safe for concurrent
// use. The zero value is not usable; call NewFake.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]struct{} // armed timers
}

// NewFake returns a fake clock that reads start until moved.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, timers: make(map[*fakeTimer]struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the fake clock reaches Now()+d.
// A timer with d <= 0 fires at once.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{clock: f, c: make(chan time.Time, 1)}
	f.mu.Lock()
	defer f.mu.Unlock()
	t.armLocked(d)
	return t
}

// Advance moves the clock forward by d (a negative d moves it back) and fires
// the timers that are then due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(f.now.Add(d))
}

// Set jumps the clock to t, forward or back, and fires the timers that are
// then due. Jumping back fires nothing and leaves armed timers armed.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(t)
}

// Timers returns the number of armed timers.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// setLocked moves the clock and fires due timers in deadline order.
// f.mu must be held.
func (f *Fake) setLocked(t time.Time) {
	f.now = t
	var due []*fakeTimer
	for ft := range f.timers {
		if !ft.deadline.After(t) {
			due = append(due, ft)
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i].deadline.Before(due[j].deadline) })
	for _, ft := range due {
		ft.fireLocked()
	}
}

type fakeTimer struct {
	clock    *Fake
	c        chan time.Time
	deadline time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	return t.disarmLocked()
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	armed := t.disarmLocked()
	t.armLocked(d)
	return armed
}

func (t *fakeTimer) ResetAt(at time.Time) bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	armed := t.disarmLocked()
	t.armLocked(at.Sub(t.clock.now))
	return armed
}

// disarmLocked removes the timer and drains a value it already sent.
func (t *fakeTimer) disarmLocked() bool {
	_, armed := t.clock.timers[t]
	delete(t.clock.timers, t)
	select {
	case <-t.c:
	default:
	}
	return armed
}

func (t *fakeTimer) armLocked(d time.Duration) {
	t.deadline = t.clock.now.Add(d)
	if d <= 0 {
		t.fireLocked()
		return
	}
	t.clock.timers[t] = struct{}{}
}

func (t *fakeTimer) fireLocked() {
	delete(t.clock.timers, t)
	select {
	case t.c <- t.clock.now:
	default:
	}
}

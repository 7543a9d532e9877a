package clock

import (
	"testing"
	"time"
)

func TestReal_TimerFires(t *testing.T) {
	c := Real()
	start := c.Now()
	tm := c.NewTimer(time.Millisecond)
	<-tm.C()
	if c.Now().Sub(start) < time.Millisecond {
		t.Fatalf("timer fired after %v, want >= 1ms", c.Now().Sub(start))
	}
	if tm.Stop() {
		t.Fatal("Stop on a fired timer reported armed")
	}
}

func TestFake_AdvanceFiresDueTimersInOrder(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	a := f.NewTimer(2 * time.Second)
	b := f.NewTimer(time.Second)
	if f.Timers() != 2 {
		t.Fatalf("Timers = %d, want 2", f.Timers())
	}
	f.Advance(999 * time.Millisecond)
	select {
	case <-b.C():
		t.Fatal("timer fired early")
	default:
	}
	f.Advance(time.Millisecond)
	if got := <-b.C(); !got.Equal(start.Add(time.Second)) {
		t.Fatalf("fired at %v", got)
	}
	select {
	case <-a.C():
		t.Fatal("a fired early")
	default:
	}
	f.Advance(time.Hour)
	<-a.C()
	if f.Timers() != 0 {
		t.Fatalf("Timers = %d, want 0", f.Timers())
	}
}

func TestFake_JumpBackFiresNothing(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	tm := f.NewTimer(time.Minute)
	f.Set(start.Add(-time.Hour))
	select {
	case <-tm.C():
		t.Fatal("jump back fired a timer")
	default:
	}
	if !f.Now().Equal(start.Add(-time.Hour)) {
		t.Fatalf("Now = %v", f.Now())
	}
	f.Set(start.Add(time.Minute))
	<-tm.C()
}

func TestFake_StopAndResetDrain(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tm := f.NewTimer(time.Second)
	f.Advance(time.Second) // fired, value buffered
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a fired timer reported armed")
	}
	select {
	case <-tm.C():
		t.Fatal("stale value after Reset")
	default:
	}
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reported not armed")
	}
	f.Advance(time.Hour)
	select {
	case <-tm.C():
		t.Fatal("stopped timer fired")
	default:
	}
	z := f.NewTimer(0)
	<-z.C()
}

func TestFake_YearsAhead(t *testing.T) {
	f := NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	tm := f.NewTimer(2 * 365 * 24 * time.Hour)
	f.Advance(2 * 365 * 24 * time.Hour)
	if got := (<-tm.C()).Year(); got != 2032 {
		t.Fatalf("fired in %d", got)
	}
}

func TestFake_ResetAtIsAbsolute(t *testing.T) {
	start := time.Unix(1000, 0)
	f := NewFake(start)
	tm := f.NewTimer(time.Hour)
	f.Advance(10 * time.Second) // the clock moves before the owner re-arms
	tm.ResetAt(start.Add(5 * time.Second))
	select {
	case <-tm.C():
	default:
		t.Fatal("ResetAt to a time already passed did not fire")
	}
	tm.ResetAt(start.Add(time.Minute))
	f.Advance(49 * time.Second)
	select {
	case <-tm.C():
		t.Fatal("fired early")
	default:
	}
	f.Advance(time.Second)
	<-tm.C()
	r := Real().NewTimer(time.Hour)
	r.ResetAt(time.Now().Add(time.Millisecond))
	<-r.C()
}

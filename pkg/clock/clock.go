package clock

import "time"

// Clock tells the time and makes timers.
type Clock interface {
	// Now returns the current wall-clock time.
	Now() time.Time
	// NewTimer returns a timer that sends the time on its channel once d has
	// elapsed.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of time.Timer that schedulers use. Stop and Reset follow
// time.Timer's Go 1.23 semantics: after they return, no stale value is
// received from C.
type Timer interface {
	// C is the channel on which the timer delivers its time.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was armed.
	Stop() bool
	// Reset re-arms the timer to fire after d; it reports whether it was
	// armed.
	Reset(d time.Duration) bool
	// ResetAt re-arms the timer to fire when the clock reads t (at once if
	// it already does); it reports whether it was armed. A loop that
	// computed its deadline from an earlier reading of the clock arms with
	// ResetAt, so a clock that moved meanwhile cannot push the wake-up back.
	ResetAt(t time.Time) bool
}

// Real returns the machine's clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
func (t realTimer) ResetAt(at time.Time) bool  { return t.t.Reset(time.Until(at)) }

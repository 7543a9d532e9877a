package actor

import (
	"sync"
	"time"
)

// Actor is a mailbox and a handler scheduled on a Scheduler. Its handler runs
// on one worker at a time.
type Actor[M any] struct {
	s       *Scheduler
	name    string
	handle  func(M)
	limit   int
	mu      sync.Mutex
	box     []M // mailbox; head at box[head]
	head    int
	queued  bool // in the run queue or running
	runTime time.Duration
}

// New returns an actor with a mailbox of at most mailbox messages (default
// 10,000 when mailbox <= 0) whose handler is handle.
func New[M any](s *Scheduler, name string, mailbox int, handle func(M)) *Actor[M] {
	if mailbox <= 0 {
		mailbox = 10000
	}
	return &Actor[M]{s: s, name: name, handle: handle, limit: mailbox}
}

// Name returns the actor's name.
func (a *Actor[M]) Name() string { return a.name }

// Send puts m in the mailbox and schedules the actor. It returns false, and
// drops m, when the mailbox is full or the scheduler has closed.
func (a *Actor[M]) Send(m M) bool {
	a.mu.Lock()
	if len(a.box)-a.head >= a.limit {
		a.mu.Unlock()
		return false
	}
	a.box = append(a.box, m)
	schedule := !a.queued
	a.queued = true
	a.mu.Unlock()
	if schedule && !a.s.enqueue(a) {
		a.mu.Lock()
		a.queued = false
		a.box = a.box[:len(a.box)-1]
		a.mu.Unlock()
		return false
	}
	return true
}

// RunInline handles m on the calling goroutine, as a worker would, when
// the actor is idle: its mailbox empty and not queued or running. It
// reports false, doing nothing, when the actor is busy or the scheduler has
// closed; the caller then Sends m. Messages sent while m is handled wait
// in the mailbox and the actor is queued for them afterwards (or, should
// the scheduler have closed meanwhile, handled on the caller too). It
// saves the hand-off to a worker and back for a caller whose message is
// quick to handle; the time it takes counts in RunTime.
func (a *Actor[M]) RunInline(m M) bool {
	if a.s.isClosed() {
		return false
	}
	a.mu.Lock()
	if a.queued {
		a.mu.Unlock()
		return false
	}
	a.queued = true
	a.mu.Unlock()
	start := time.Now()
	a.handle(m)
	a.mu.Lock()
	a.runTime += time.Since(start)
	if a.head == len(a.box) {
		a.box, a.head = a.box[:0], 0
		a.queued = false
		a.mu.Unlock()
		return true
	}
	a.mu.Unlock()
	if !a.s.enqueue(a) {
		for a.run(time.Now().Add(time.Hour)) {
		}
	}
	return true
}

// Pending returns the number of messages waiting in the mailbox.
func (a *Actor[M]) Pending() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.box) - a.head
}

// RunTime returns the total time the actor's handler has run.
func (a *Actor[M]) RunTime() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runTime
}

// run handles messages until the mailbox is empty or deadline passes.
func (a *Actor[M]) run(deadline time.Time) bool {
	start := time.Now()
	var zero M
	for {
		a.mu.Lock()
		if a.head == len(a.box) {
			a.box, a.head = a.box[:0], 0
			a.queued = false
			a.runTime += time.Since(start)
			a.mu.Unlock()
			return false
		}
		m := a.box[a.head]
		a.box[a.head] = zero
		a.head++
		a.mu.Unlock()

		a.handle(m)

		if !time.Now().Before(deadline) {
			a.mu.Lock()
			more := a.head < len(a.box)
			if !more {
				a.box, a.head = a.box[:0], 0
				a.queued = false
			}
			a.runTime += time.Since(start)
			a.mu.Unlock()
			return more
		}
	}
}

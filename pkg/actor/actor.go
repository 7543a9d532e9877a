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

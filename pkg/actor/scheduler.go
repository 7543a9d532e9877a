package actor

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Scheduler.
type Options struct {
	// Workers is the number of worker goroutines (default 4 × GOMAXPROCS).
	Workers int
	// Slice is how long an actor may run before yielding (default 5 ms).
	Slice time.Duration
}

// Validate checks the options.
func (o Options) Validate() error {
	if o.Workers < 0 {
		return fmt.Errorf("actor: Workers must not be negative, got %d", o.Workers)
	}
	if o.Slice < 0 {
		return fmt.Errorf("actor: Slice must not be negative, got %v", o.Slice)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.Workers == 0 {
		o.Workers = 4 * runtime.GOMAXPROCS(0)
	}
	if o.Slice == 0 {
		o.Slice = 5 * time.Millisecond
	}
	return o
}

// ErrClosed is returned by Send after the scheduler closed.
var ErrClosed = errors.New("actor: scheduler closed")

// runnable is what the run queue holds: an actor that has messages.
type runnable interface {
	// run processes messages until the mailbox is empty or the deadline
	// passes; it reports whether messages remain.
	run(deadline time.Time) bool
}

// Scheduler runs actors on a pool of workers.
type Scheduler struct {
	opts Options

	mu     sync.Mutex
	cond   *sync.Cond
	queue  []runnable // FIFO run queue; head at queue[head]
	head   int
	closed bool

	closing atomic.Bool // closed, readable without mu

	wg sync.WaitGroup
}

// NewScheduler starts a scheduler and its workers.
func NewScheduler(opts Options) (*Scheduler, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Scheduler{opts: opts.withDefaults()}
	s.cond = sync.NewCond(&s.mu)
	for i := 0; i < s.opts.Workers; i++ {
		s.wg.Add(1)
		go s.workerLoop()
	}
	return s, nil
}

// enqueue puts r at the back of the run queue.
func (s *Scheduler) enqueue(r runnable) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.queue = append(s.queue, r)
	s.mu.Unlock()
	s.cond.Signal()
	return true
}

// isClosed reports whether Close has been called, without the run queue's
// lock (RunInline asks on every call).
func (s *Scheduler) isClosed() bool { return s.closing.Load() }

func (s *Scheduler) workerLoop() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		for s.head == len(s.queue) && !s.closed {
			s.cond.Wait()
		}
		if s.head == len(s.queue) {
			s.mu.Unlock()
			return
		}
		r := s.queue[s.head]
		s.queue[s.head] = nil
		s.head++
		if s.head == len(s.queue) {
			s.queue, s.head = s.queue[:0], 0
		} else if s.head > 1024 && s.head*2 > len(s.queue) {
			n := copy(s.queue, s.queue[s.head:])
			s.queue, s.head = s.queue[:n], 0
		}
		s.mu.Unlock()

		if r.run(time.Now().Add(s.opts.Slice)) {
			s.mu.Lock()
			s.queue = append(s.queue, r) // yield: back of the queue
			s.mu.Unlock()
			s.cond.Signal()
		}
	}
}

// Close stops accepting sends, lets the workers finish the actors already
// queued, and waits for them.
func (s *Scheduler) Close() {
	s.mu.Lock()
	s.closed = true
	s.closing.Store(true)
	s.mu.Unlock()
	s.cond.Broadcast()
	s.wg.Wait()
}

package producer

import (
	"context"
	"fmt"
	"sync"
)

// inbox is the bounded queue of messages waiting for sendLoop
// (WithQueueSize). A message costs its sender one uncontended lock and an
// append, and sendLoop takes up to maxDrain at a time under one lock: a
// channel cost a lock each side per message, plus the producer's RWMutex
// (13 % of the producer's CPU at 256 B, NOTES.md). sendLoop is woken only
// when a message arrives in an empty inbox (wake); a sender that finds it
// full waits for sendLoop to take some (space). Taken messages leave the
// bound: while every batch waits for an in-flight slot, sendLoop holds up
// to maxDrain of them taken but not yet batched (sender.taken).
//
// close refuses new messages but waits for the senders already past that
// check (waiting for space, with their message not yet in): Close then
// knows everything it must send is in, as its drain requires.
type inbox struct {
	mu      sync.Mutex
	items   []*pending // queued from head on, oldest first
	head    int
	size    int           // the bound
	closed  bool          // close was called: no new senders
	waiters int           // senders waiting for space (past the closed check)
	space   chan struct{} // closed when sendLoop takes messages; nil while no one waits
	drained chan struct{} // closed when waiters drops to zero after close
	wake    chan struct{} // a message arrived in an empty inbox (capacity 1)
}

func newInbox(size int) *inbox {
	return &inbox{size: size, wake: make(chan struct{}, 1)}
}

// push queues pd. A full inbox fails it with ErrQueueFull under
// nonBlocking, else makes it wait until sendLoop takes messages or ctx
// ends. A closed inbox fails it with ErrClosed.
func (in *inbox) push(ctx context.Context, pd *pending, nonBlocking bool) error {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return ErrClosed
	}
	if len(in.items)-in.head >= in.size {
		if nonBlocking {
			in.mu.Unlock()
			return ErrQueueFull
		}
		if err := in.waitLocked(ctx); err != nil {
			return err
		}
	}
	wasEmpty := len(in.items) == in.head
	if len(in.items) == cap(in.items) && in.head > 0 {
		// Slide what is queued to the front rather than grow.
		n := copy(in.items, in.items[in.head:])
		clear(in.items[n:])
		in.items, in.head = in.items[:n], 0
	}
	in.items = append(in.items, pd)
	in.mu.Unlock()
	if wasEmpty {
		select {
		case in.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// waitLocked waits for space, as a waiter (close waits for it); it returns
// with in.mu held and space in the inbox, or with in.mu released and ctx's
// error.
func (in *inbox) waitLocked(ctx context.Context) error {
	in.waiters++
	for len(in.items)-in.head >= in.size {
		if in.space == nil {
			in.space = make(chan struct{})
		}
		space := in.space
		in.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			in.mu.Lock()
			in.leftLocked()
			in.mu.Unlock()
			return fmt.Errorf("producer: waiting for queue space: %w", ctx.Err())
		}
		in.mu.Lock()
	}
	// Still holding in.mu, the caller queues its message before close
	// can see this waiter gone.
	in.leftLocked()
	return nil
}

// leftLocked counts a waiter out, telling close when it was the last.
func (in *inbox) leftLocked() {
	in.waiters--
	if in.waiters == 0 && in.drained != nil {
		close(in.drained)
		in.drained = nil
	}
}

// take appends up to max queued messages to dst, oldest first, and makes
// room for waiting senders.
func (in *inbox) take(dst []*pending, max int) []*pending {
	in.mu.Lock()
	n := min(len(in.items)-in.head, max)
	if n == 0 {
		in.mu.Unlock()
		return dst
	}
	dst = append(dst, in.items[in.head:in.head+n]...)
	clear(in.items[in.head : in.head+n])
	in.head += n
	if in.head == len(in.items) {
		in.items, in.head = in.items[:0], 0
	}
	if in.space != nil {
		close(in.space)
		in.space = nil
	}
	in.mu.Unlock()
	return dst
}

// len returns the number of queued messages.
func (in *inbox) len() int {
	in.mu.Lock()
	n := len(in.items) - in.head
	in.mu.Unlock()
	return n
}

// close refuses new senders and returns once those waiting for space have
// queued their message or given up.
func (in *inbox) close() {
	in.mu.Lock()
	in.closed = true
	if in.waiters == 0 {
		in.mu.Unlock()
		return
	}
	drained := make(chan struct{})
	in.drained = drained
	in.mu.Unlock()
	<-drained
}

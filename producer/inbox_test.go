package producer

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A full inbox refuses under nonBlocking, holds a blocking sender until
// messages are taken, and lets a sender give up with its context.
func TestInbox_BoundAndWaiters(t *testing.T) {
	in := newInbox(2)
	ctx := context.Background()
	a, b, c := &pending{id: "a"}, &pending{id: "b"}, &pending{id: "c"}
	if err := in.push(ctx, a, false); err != nil {
		t.Fatal(err)
	}
	if len(in.wake) != 1 {
		t.Fatal("a message in an empty inbox did not wake sendLoop")
	}
	<-in.wake
	if err := in.push(ctx, b, false); err != nil || len(in.wake) != 0 {
		t.Fatalf("second push: %v, wake %d (want no wake: the inbox was not empty)", err, len(in.wake))
	}
	if err := in.push(ctx, c, true); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("non-blocking push into a full inbox: %v, want ErrQueueFull", err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := in.push(short, c, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocked push past its context: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- in.push(ctx, c, false) }()
	select {
	case err := <-done:
		t.Fatalf("push into a full inbox returned %v at once", err)
	case <-time.After(20 * time.Millisecond):
	}
	got := in.take(nil, 1)
	if len(got) != 1 || got[0] != a {
		t.Fatalf("took %v, want [a]", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got = in.take(got[:0], 10)
	if len(got) != 2 || got[0] != b || got[1] != c || in.len() != 0 {
		t.Fatalf("took %d (%v), %d left; want b, c and none left", len(got), got, in.len())
	}
}

// close waits for the senders already waiting for space, and refuses new
// ones.
func TestInbox_CloseWaitsForWaiters(t *testing.T) {
	in := newInbox(1)
	ctx := context.Background()
	if err := in.push(ctx, &pending{}, false); err != nil {
		t.Fatal(err)
	}
	waiter := make(chan error, 1)
	go func() { waiter <- in.push(ctx, &pending{id: "w"}, false) }()
	for {
		in.mu.Lock()
		w := in.waiters
		in.mu.Unlock()
		if w == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { in.close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("close returned while a sender waited for space")
	case <-time.After(20 * time.Millisecond):
	}
	if err := in.push(ctx, &pending{}, true); !errors.Is(err, ErrClosed) {
		t.Fatalf("push after close: %v, want ErrClosed", err)
	}
	in.take(nil, 1)
	if err := <-waiter; err != nil {
		t.Fatalf("the waiting sender: %v", err)
	}
	<-closed
	if got := in.take(nil, 10); len(got) != 1 || got[0].id != "w" {
		t.Fatalf("took %v after close, want the waiter's message", got)
	}
}

package store

import (
	"errors"
	"testing"
	"time"
)

// TryAppendAsync stores like AppendAsync when the queue has room, and fails
// like it once the store is closed. (The full-queue branch is a select with
// a default: it queues nothing and returns ErrWouldBlock.)
func TestTryAppendAsync(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, testOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan []Result, 1)
	if err := s.TryAppendAsync([][]byte{encode(t, "s", "id-1", []byte("x"))}, func(r []Result) { done <- r }); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r[0].Err != nil {
			t.Fatal(r[0].Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no result")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.TryAppendAsync([][]byte{encode(t, "s", "id-2", []byte("y"))}, func([]Result) {}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

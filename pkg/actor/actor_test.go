package actor

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newScheduler(t *testing.T, o Options) *Scheduler {
	t.Helper()
	s, err := NewScheduler(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestActor_ProcessesInOrderOneAtATime(t *testing.T) {
	s := newScheduler(t, Options{Workers: 4})
	var running atomic.Int32
	var got []int
	var wg sync.WaitGroup
	wg.Add(1000)
	a := New(s, "a", 0, func(i int) {
		if running.Add(1) != 1 {
			t.Error("handler ran concurrently with itself")
		}
		got = append(got, i)
		running.Add(-1)
		wg.Done()
	})
	for i := range 1000 {
		if !a.Send(i) {
			t.Fatal("send refused")
		}
	}
	wg.Wait()
	for i, v := range got {
		if v != i {
			t.Fatalf("message %d arrived as %d", i, v)
		}
	}
}

func TestActor_MailboxBound(t *testing.T) {
	s := newScheduler(t, Options{Workers: 1})
	block := make(chan struct{})
	started := make(chan struct{}, 1)
	a := New(s, "a", 2, func(int) {
		select {
		case started <- struct{}{}:
		default:
		}
		<-block
	})
	a.Send(0)
	<-started // the worker holds message 0; the mailbox is empty again
	if !a.Send(1) || !a.Send(2) {
		t.Fatal("sends within the bound refused")
	}
	if a.Send(3) {
		t.Fatal("send past the bound accepted")
	}
	close(block)
}

// A flooded actor must not starve a light one: with one worker and a 1 ms
// slice, the light actor's messages are handled within a few slices even
// while the heavy actor has thousands queued.
func TestScheduler_TimeSlicesAreFair(t *testing.T) {
	s := newScheduler(t, Options{Workers: 1, Slice: time.Millisecond})
	var heavyDone atomic.Int64
	heavy := New(s, "heavy", 100000, func(int) {
		time.Sleep(100 * time.Microsecond)
		heavyDone.Add(1)
	})
	for i := range 3000 {
		heavy.Send(i)
	}
	lightDone := make(chan time.Time, 10)
	light := New(s, "light", 0, func(int) { lightDone <- time.Now() })
	for round := range 10 {
		sent := time.Now()
		light.Send(round)
		select {
		case at := <-lightDone:
			if wait := at.Sub(sent); wait > 100*time.Millisecond {
				t.Fatalf("light actor waited %v behind the heavy one", wait)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("light actor starved")
		}
	}
	if heavyDone.Load() == 0 {
		t.Fatal("heavy actor made no progress")
	}
	if heavy.Pending() == 0 {
		t.Skip("machine too fast for the heavy backlog to outlast the test")
	}
}

func TestScheduler_CloseRefusesSends(t *testing.T) {
	s, _ := NewScheduler(Options{Workers: 2})
	a := New(s, "a", 0, func(int) {})
	s.Close()
	if a.Send(1) {
		t.Fatal("send after close accepted")
	}
	if _, err := NewScheduler(Options{Workers: -1}); err == nil {
		t.Fatal("bad options accepted")
	}
}

func BenchmarkActorSend(b *testing.B) {
	s, _ := NewScheduler(Options{})
	defer s.Close()
	var wg sync.WaitGroup
	a := New(s, "a", 1<<20, func(int) { wg.Done() })
	b.ReportAllocs()
	for b.Loop() {
		wg.Add(1)
		for !a.Send(1) {
		}
	}
	wg.Wait()
}

func TestActor_RunInline(t *testing.T) {
	s := newScheduler(t, Options{Workers: 2})
	var mu sync.Mutex
	var got []int
	block := make(chan struct{})
	entered := make(chan struct{}, 1)
	var wg sync.WaitGroup
	a := New(s, "a", 0, func(i int) {
		if i == 1 {
			entered <- struct{}{}
			<-block
		}
		mu.Lock()
		got = append(got, i)
		mu.Unlock()
		wg.Done()
	})
	caller := make(chan struct{})
	wg.Add(1)
	if !a.RunInline(0) {
		t.Fatal("idle actor refused an inline run")
	}
	// While message 1 runs inline (blocked in its handler), the actor is
	// busy: another inline run is refused, and sends wait in the mailbox.
	wg.Add(1)
	go func() {
		defer close(caller)
		if !a.RunInline(1) {
			t.Error("idle actor refused an inline run")
		}
	}()
	<-entered
	if a.RunInline(2) {
		t.Fatal("busy actor ran a second message inline")
	}
	wg.Add(2)
	for _, i := range []int{2, 3} {
		if !a.Send(i) {
			t.Fatal("send refused")
		}
	}
	if n := a.Pending(); n != 2 {
		t.Fatalf("pending %d during the inline run, want 2", n)
	}
	close(block)
	<-caller
	wg.Wait() // the sends ran on a worker after the inline run
	mu.Lock()
	if len(got) != 4 || got[0] != 0 || got[1] != 1 || got[2] != 2 || got[3] != 3 {
		t.Fatalf("handled %v, want [0 1 2 3]", got)
	}
	mu.Unlock()
	if a.RunTime() <= 0 {
		t.Fatal("inline runs not counted in RunTime")
	}
	// The worker marks the actor idle just after its last handler returns
	// (wg.Wait may see the handler first); a refused RunInline does nothing,
	// so ask until the actor is idle.
	wg.Add(1)
	for deadline := time.Now().Add(5 * time.Second); !a.RunInline(4); {
		if time.Now().After(deadline) {
			t.Fatal("actor idle again refused an inline run")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestActor_RunInlineAfterClose(t *testing.T) {
	s, _ := NewScheduler(Options{Workers: 1})
	ran := false
	a := New(s, "a", 0, func(int) { ran = true })
	s.Close()
	if a.RunInline(1) || ran {
		t.Fatal("inline run after close")
	}
}

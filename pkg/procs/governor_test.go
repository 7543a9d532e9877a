package procs

import (
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/testutil"
)

func testGovernor(t *testing.T) *Governor {
	t.Helper()
	orig := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(orig) })
	// Up 0.3: a spinning goroutine gets that much of a core even on a
	// machine busy with other tests.
	g, err := New(Options{Max: 2, Window: 10 * time.Millisecond, Up: 0.3, DownAfter: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// spin burns a core until stop is set.
func spin(stop *atomic.Bool) {
	for !stop.Load() {
		for range 1000 {
		}
	}
}

// An idle process runs on one processor; one that saturates it gets all of
// them within a few Windows, and goes back to one once it is quiet.
func TestGovernor_FollowsTheLoad(t *testing.T) {
	g := testGovernor(t)
	g.Start()
	defer g.Close()
	if g.Procs() != 1 || runtime.GOMAXPROCS(0) != 1 {
		t.Fatalf("after Start: Procs %d, GOMAXPROCS %d; want 1", g.Procs(), runtime.GOMAXPROCS(0))
	}
	var stop atomic.Bool
	go spin(&stop)
	testutil.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if n := runtime.GOMAXPROCS(0); n != 2 || g.Procs() != 2 {
			return errors.New("still on one processor with a core busy")
		}
		return nil
	})
	stop.Store(true)
	testutil.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if n := runtime.GOMAXPROCS(0); n != 1 || g.Procs() != 1 {
			return errors.New("still on all processors while idle")
		}
		return nil
	})
}

// Close stops the governor and leaves the process on Max.
func TestGovernor_CloseLeavesMax(t *testing.T) {
	g := testGovernor(t)
	g.Start()
	g.Close()
	if n := runtime.GOMAXPROCS(0); n != 2 || g.Procs() != 2 {
		t.Fatalf("after Close: GOMAXPROCS %d, Procs %d; want 2", n, g.Procs())
	}
	g.Close() // twice is fine
}

func TestGovernor_MaxOneDoesNothing(t *testing.T) {
	orig := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(orig)
	g, err := New(Options{Max: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g.Start()
	defer g.Close()
	if n := runtime.GOMAXPROCS(0); n != orig {
		t.Fatalf("a governor with Max 1 set GOMAXPROCS to %d", n)
	}
}

func TestOptions_Validate(t *testing.T) {
	for name, o := range map[string]Options{
		"negative max":          {Max: -1},
		"tiny window":           {Window: time.Microsecond},
		"up above 1":            {Up: 1.5},
		"negative down":         {Down: -1},
		"negative after":        {DownAfter: -2},
		"negative up after":     {UpAfter: -1},
		"negative latency":      {UpLatency: -time.Millisecond},
		"negative down latency": {DownLatency: -time.Millisecond},
	} {
		if err := o.Validate(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: Validate = %v, want ErrInvalidOptions", name, err)
		}
		if _, err := New(o, nil); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: New = %v, want ErrInvalidOptions", name, err)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

// SchedLatency sees the goroutines that ran since its last Read.
func TestSchedLatency_CountsWakeUps(t *testing.T) {
	l := NewSchedLatency()
	l.Read()
	done := make(chan struct{})
	for range 1000 {
		go func() { done <- struct{}{} }()
		<-done
	}
	if mean, n := l.Read(); n == 0 || mean < 0 {
		t.Fatalf("Read after 1,000 goroutines = mean %v over %d", mean, n)
	}
}

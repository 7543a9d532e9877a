package realtime

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

func TestParseSchedstatWait(t *testing.T) {
	for _, tc := range []struct {
		line string
		want time.Duration
		ok   bool
	}{
		{"2492945600 2409434095 41833\n", 2409434095, true},
		{"1 0 1", 0, true},
		{"", 0, false},
		{"12", 0, false},
		{"1 x 2", 0, false},
		{"1 -5 2", 0, false},
	} {
		got, ok := parseSchedstatWait([]byte(tc.line))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseSchedstatWait(%q) = %v, %v; want %v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

// More runnable threads than CPUs must show up as run-queue wait.
func TestRunQueueWait_GrowsWhenThreadsQueue(t *testing.T) {
	before, ok := runQueueWait()
	if !ok {
		t.Skip("no /proc/self/task/*/schedstat here")
	}
	n := 3 * runtime.NumCPU()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n + 1)) // all of them run Go code at once
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // a thread each, all runnable at once
			defer runtime.UnlockOSThread()
			for {
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if after, ok := runQueueWait(); ok && after-before > 20*time.Millisecond {
			return
		}
	}
	after, _ := runQueueWait()
	t.Fatalf("run-queue wait grew by %v with %d spinning threads on %d CPUs", after-before, n, runtime.NumCPU())
}

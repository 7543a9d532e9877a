package main

import (
	"os"
	"syscall"
	"testing"
	"time"
)

func TestParseProcessCPU(t *testing.T) {
	// A command name with a space and a parenthesis; utime 250, stime 31.
	stat := "4242 (qmq (x) y) S 1 4242 4242 0 -1 4194560 1520 0 0 0 250 31 0 0 20 0 7 0 100 1000 200"
	if got, ok := parseProcessCPU(stat); !ok || got != 2810*time.Millisecond {
		t.Fatalf("parseProcessCPU = %v, %v; want 2.81s, true", got, ok)
	}
	for _, bad := range []string{"", "4242 qmq S 1", "4242 (qmq) S 1 2 3", "4242 (qmq) S 1 4242 4242 0 -1 4194560 1520 0 0 0 x 31 0"} {
		if _, ok := parseProcessCPU(bad); ok {
			t.Fatalf("parseProcessCPU(%q) accepted", bad)
		}
	}
}

func TestParseProcessFaults(t *testing.T) {
	// minflt (field 10) is 1520 in the line above.
	stat := "4242 (qmq (x) y) S 1 4242 4242 0 -1 4194560 1520 0 0 0 250 31 0 0 20 0 7 0 100 1000 200"
	if got := parseProcessFaults(stat); got != 1520 {
		t.Fatalf("parseProcessFaults = %d, want 1520", got)
	}
	if got := parseProcessFaults("4242 (qmq) S 1 2"); got != 0 {
		t.Fatalf("parseProcessFaults(short) = %d, want 0", got)
	}
	if processFaults(os.Getpid()) <= 0 {
		t.Fatal("this process has taken no page fault")
	}
}

func TestProcessCPU_GrowsWhileBusy(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	acct := newCPUAccount(os.Getpid(), -1) // -1: no such process, counted 0
	a := acct.sample()
	start, startCPU := time.Now(), rusageCPU(t)
	x := 0
	// Busy until the process has used 300 ms of CPU by getrusage's count
	// (on a loaded machine that takes longer than 300 ms of wall time).
	for rusageCPU(t)-startCPU < 300*time.Millisecond && time.Since(start) < 30*time.Second {
		for range 100_000 {
			x += int(time.Since(start)) & 7
		}
	}
	span := time.Since(start)
	used := rusageCPU(t) - startCPU
	acct.add(a, acct.sample(), span)
	// The account's CPU over the span must be what getrusage saw, give or
	// take a few clock ticks.
	got := time.Duration(acct.cores(0) * float64(span))
	if got < used/2 || got > used*2+50*time.Millisecond {
		t.Fatalf("the account saw %v of CPU over %v, getrusage %v (x=%d)", got, span, used, x)
	}
	if got := acct.cores(1); got != 0 {
		t.Fatalf("a missing process used %.2f cores", got)
	}
}

func TestCPUAccount(t *testing.T) {
	c := newCPUAccount(1, 2)
	c.add([]time.Duration{100, 10}, []time.Duration{150, 60}, 500)
	c.add([]time.Duration{200, 70}, []time.Duration{240, 80}, 500)
	if got := c.cores(0); got != 0.09 {
		t.Fatalf("cores(0) = %v, want 0.09", got)
	}
	if got := c.cores(1); got != 0.06 {
		t.Fatalf("cores(1) = %v, want 0.06", got)
	}
	if got := c.cores(2); got != 0 {
		t.Fatalf("cores of an unknown process = %v", got)
	}
}

// rusageCPU is the process's user and system CPU time by getrusage.
func rusageCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

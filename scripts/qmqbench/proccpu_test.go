package main

import (
	"os"
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

func TestProcessCPU_GrowsWhileBusy(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	acct := newCPUAccount(os.Getpid(), -1) // -1: no such process, counted 0
	a := acct.sample()
	start := time.Now()
	x := 0
	for time.Since(start) < 200*time.Millisecond { // busy
		x += int(time.Since(start)) & 7
	}
	acct.add(a, acct.sample(), time.Since(start))
	if got := acct.cores(0); got < 0.2 || got > 4 {
		t.Fatalf("a busy loop used %.2f cores (x=%d)", got, x)
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

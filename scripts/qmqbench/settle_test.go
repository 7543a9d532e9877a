package main

import (
	"os"
	"testing"
	"time"
)

func TestWholeDisk(t *testing.T) {
	for _, name := range []string{"loop0", "ram1", "dm-0", "zram0", "sr0", "no-such-disk"} {
		if wholeDisk(name) {
			t.Errorf("wholeDisk(%q) = true", name)
		}
	}
}

// settleDisks returns within its bound whether or not the disks go quiet.
func TestSettleDisksReturns(t *testing.T) {
	if _, err := os.Stat("/proc/diskstats"); err != nil {
		t.Skip("no /proc/diskstats")
	}
	if _, ok := diskIOs(); !ok {
		t.Fatal("diskIOs could not read /proc/diskstats")
	}
	start := time.Now()
	settleDisks(100*time.Millisecond, 500*time.Millisecond)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("settleDisks took %v with a bound of 500ms (sync included)", took)
	}
}

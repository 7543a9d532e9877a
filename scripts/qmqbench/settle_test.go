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

// The fdatasync probe measures a quiet level on a real file, and waitQuiet
// returns within its bound whether or not the disk reads quiet.
func TestSyncProbe(t *testing.T) {
	p, err := newSyncProbe(t.TempDir() + "/probe")
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	if p.quiet <= 0 || p.limit() < p.quiet {
		t.Fatalf("quiet %v, limit %v", p.quiet, p.limit())
	}
	if st, err := os.Stat(p.f.Name()); err != nil || st.Size() != syncProbeFile {
		t.Fatalf("probe file: %v, %v", st, err)
	}
	start := time.Now()
	waited, slowest, ok, err := p.waitQuiet(3 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*time.Second+2*syncProbeWindow {
		t.Fatalf("waitQuiet took %v with a bound of 3s", took)
	}
	if slowest <= 0 || waited < syncProbeWindow {
		t.Fatalf("waited %v, slowest second p99 %v", waited, slowest)
	}
	if st, err := os.Stat(p.f.Name()); err != nil || st.Size() != syncProbeFile {
		t.Fatalf("probe file after probing (overwrites only): %v, %v", st, err)
	}
	t.Logf("quiet p99 %v, waited %v (quiet again: %v), slowest second p99 %v", p.quiet, waited, ok, slowest)
}

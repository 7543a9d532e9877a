package realtime

import (
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The dedupe table asks for transparent huge pages (hugemem.Uint64s): where
// the kernel offers them, the process's huge-page memory grows by it.
func TestDedupe_TableOnHugePages(t *testing.T) {
	if mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || strings.Contains(string(mode), "[never]") {
		t.Skip("no transparent huge pages here")
	}
	// Earlier tests' tables are garbage on huge pages the heap may hand out
	// again (or give back during the measurement): release them first, so
	// that this table's pages are faulted in afresh.
	runtime.GC()
	debug.FreeOSMemory()
	before := anonHugeKiB(t)
	d := newDedupe(time.Hour, 1_000_000, time.Now)
	for i := range 100_000 {
		d.reserve(uint64(i) * 0x9E3779B97F4A7C15)
	}
	if grown := anonHugeKiB(t) - before; grown < 2048 {
		t.Fatalf("huge-page memory grew by %d KiB for a 16 MiB table", grown)
	}
}

// anonHugeKiB returns the process's AnonHugePages.
func anonHugeKiB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		t.Skipf("no smaps_rollup: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "AnonHugePages:" {
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no AnonHugePages in smaps_rollup")
	return 0
}

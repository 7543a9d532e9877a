package realtime

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/testutil"
)

// The dedupe table asks for transparent huge pages (hugemem.Uint64s): where
// the kernel offers them, the process's huge-page memory grows by it.
func TestDedupe_TableOnHugePages(t *testing.T) {
	if !testutil.HugePagesOffered() {
		t.Skip("no transparent huge pages here")
	}
	// Earlier tests' tables are garbage on huge pages the heap may hand out
	// again (or give back during the measurement): release them first, so
	// that this table's pages are faulted in afresh.
	runtime.GC()
	debug.FreeOSMemory()
	before := testutil.AnonHugeKiB(t)
	d := newDedupe(time.Hour, 1_000_000, time.Now)
	for i := range 100_000 {
		d.reserve(uint64(i) * 0x9E3779B97F4A7C15)
	}
	if grown := testutil.AnonHugeKiB(t) - before; grown < 2048 {
		t.Fatalf("huge-page memory grew by %d KiB for a 16 MiB table", grown)
	}
}

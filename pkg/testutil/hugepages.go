package testutil

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// HugePagesOffered reports whether the kernel offers transparent huge pages
// (mode "always" or "madvise").
func HugePagesOffered() bool {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	return err == nil && !strings.Contains(string(mode), "[never]")
}

// AnonHugeKiB returns the process's AnonHugePages (KiB of anonymous memory
// on transparent huge pages), and skips the test where the kernel does not
// report it.
func AnonHugeKiB(t testing.TB) int {
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

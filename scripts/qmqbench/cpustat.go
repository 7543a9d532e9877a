package main

// What the machine's CPUs did during a suite, from /proc/stat: a ratio
// measured while another tenant of the host takes a third of the CPU time
// (steal) is not one measured on a quiet host, and the line says which.
// It is printed as a comment (# cpu during SUITE: …), not as a metric.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// cpuTimes are the aggregate "cpu" line's counters of /proc/stat, in ticks.
type cpuTimes struct {
	busy, idle, iowait, steal uint64
}

// readCPUTimes reads /proc/stat; ok is false where there is none.
func readCPUTimes() (cpuTimes, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}, false
	}
	var v [8]uint64 // user nice system idle iowait irq softirq steal
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			return cpuTimes{}, false
		}
	}
	return cpuTimes{busy: v[0] + v[1] + v[2] + v[5] + v[6], idle: v[3], iowait: v[4], steal: v[7]}, true
}

// cpuSplit describes the time between a and b as shares of all CPU time.
func cpuSplit(a, b cpuTimes) string {
	busy, idle, iowait, steal := b.busy-a.busy, b.idle-a.idle, b.iowait-a.iowait, b.steal-a.steal
	total := busy + idle + iowait + steal
	if total == 0 {
		return "no ticks"
	}
	pct := func(x uint64) float64 { return 100 * float64(x) / float64(total) }
	return fmt.Sprintf("busy %.0f%%, idle %.0f%%, iowait %.0f%%, steal %.0f%%", pct(busy), pct(idle), pct(iowait), pct(steal))
}

package main

// What one process's threads ran, from /proc/<pid>/stat: the subjects suite
// prints the broker's and the producer's CPU per message, and the fairness
// suite how the broker and the two groups' processes shared the CPUs in each
// phase, since its ratio is decided by that share (see fairness.go).

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// processCPU is the user and system time pid has used, from /proc/PID/stat
// (clock ticks of 10 ms, USER_HZ); 0 when it cannot be read.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	d, _ := parseProcessCPU(string(b))
	return d
}

// parseProcessCPU reads utime and stime (fields 14 and 15) from the text of
// /proc/<pid>/stat (statFields).
func parseProcessCPU(stat string) (time.Duration, bool) {
	f := statFields(stat)
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, true
}

// cpuAccount adds up the CPU time of a fixed list of processes over
// measured spans.
type cpuAccount struct {
	pids []int
	used []time.Duration // per process, over the spans
	span time.Duration   // the spans' total length
}

func newCPUAccount(pids ...int) *cpuAccount {
	return &cpuAccount{pids: pids, used: make([]time.Duration, len(pids))}
}

// sample returns each process's CPU time now.
func (c *cpuAccount) sample() []time.Duration {
	out := make([]time.Duration, len(c.pids))
	for i, pid := range c.pids {
		out[i] = processCPU(pid)
	}
	return out
}

// add counts the span of length span between samples a and b.
func (c *cpuAccount) add(a, b []time.Duration, span time.Duration) {
	for i := range c.used {
		if b[i] >= a[i] {
			c.used[i] += b[i] - a[i]
		}
	}
	c.span += span
}

// cores returns process i's mean CPU use over the spans, in cores.
func (c *cpuAccount) cores(i int) float64 {
	if c.span <= 0 || i >= len(c.used) {
		return 0
	}
	return c.used[i].Seconds() / c.span.Seconds()
}

// processFaults is the minor page faults pid has taken (field 10 of
// /proc/PID/stat); 0 when it cannot be read.
func processFaults(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	return parseProcessFaults(string(b))
}

func parseProcessFaults(stat string) int64 {
	f := statFields(stat)
	if len(f) < 8 {
		return 0
	}
	n, _ := strconv.ParseInt(f[7], 10, 64)
	return n
}

// statFields splits the text of /proc/<pid>/stat after the command name
// (field 2, in parentheses, which may hold spaces and parentheses itself):
// its first element is field 3, the state. nil when there is no name.
func statFields(stat string) []string {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(stat[i+1:])
}

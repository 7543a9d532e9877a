package realtime

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// runQueueWait returns the total time the process's threads have waited in
// the kernel's run queue: the second field of each
// /proc/self/task/<tid>/schedstat (run time, run-queue wait, timeslices, in
// nanoseconds). Threads that ended take their wait with them, so the total
// may drop; a drop reads as no wait.
func runQueueWait() (time.Duration, bool) {
	d, err := os.Open("/proc/self/task")
	if err != nil {
		return 0, false
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return 0, false
	}
	var total time.Duration
	read := false
	buf := make([]byte, 128)
	for _, name := range names {
		f, err := os.Open("/proc/self/task/" + name + "/schedstat")
		if err != nil {
			continue // the thread ended
		}
		n, _ := f.Read(buf)
		f.Close()
		if w, ok := parseSchedstatWait(buf[:n]); ok {
			total += w
			read = true
		}
	}
	return total, read
}

// parseSchedstatWait takes the run-queue wait out of a schedstat line
// ("<run ns> <wait ns> <timeslices>").
func parseSchedstatWait(line []byte) (time.Duration, bool) {
	fields := bytes.Fields(line)
	if len(fields) < 2 {
		return 0, false
	}
	ns, err := strconv.ParseInt(string(fields[1]), 10, 64)
	if err != nil || ns < 0 {
		return 0, false
	}
	return time.Duration(ns), true
}

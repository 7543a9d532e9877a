package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// settleDisks writes back what earlier suites left dirty (sync(2)) and
// waits until the machine's disks have done no I/O for quiet, at most max,
// so that a suite does not measure the writeback or the discards of the
// one before it. It reports how long it waited and whether the disks went
// quiet (false where /proc/diskstats cannot be read).
func settleDisks(quiet, max time.Duration) (time.Duration, bool) {
	start := time.Now()
	syscall.Sync()
	last, ok := diskIOs()
	if !ok {
		return time.Since(start), false
	}
	still := time.Now()
	for time.Since(start) < max {
		time.Sleep(50 * time.Millisecond)
		n, _ := diskIOs()
		if n != last {
			last, still = n, time.Now()
			continue
		}
		if time.Since(still) >= quiet {
			return time.Since(start), true
		}
	}
	return time.Since(start), false
}

// diskIOs sums the reads, writes, discards and flushes completed by the
// whole disks in /proc/diskstats (partitions and virtual devices left out).
func diskIOs() (uint64, bool) {
	b, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		return 0, false
	}
	var sum uint64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 14 || !wholeDisk(f[2]) {
			continue
		}
		// Fields after the name: reads (0), writes (4), discards (11), flushes (15).
		for _, i := range []int{3, 7, 14, 18} {
			if i < len(f) {
				v, _ := strconv.ParseUint(f[i], 10, 64)
				sum += v
			}
		}
	}
	return sum, true
}

// wholeDisk reports whether a /proc/diskstats device name is a disk
// rather than a partition, loop, ram or device-mapper device.
func wholeDisk(name string) bool {
	for _, p := range []string{"loop", "ram", "dm-", "zram", "sr"} {
		if strings.HasPrefix(name, p) {
			return false
		}
	}
	_, err := os.Stat("/sys/block/" + name)
	return err == nil
}

// settleRound is settleDisks between the rounds of a suite (at most 10 s,
// a second without disk I/O), then settleSync (at most 20 s); a round that
// starts on a busy or slow disk is logged.
func (e *Env) settleRound() {
	if waited, quiet := settleDisks(time.Second, 10*time.Second); !quiet {
		e.Logf("disks still busy after %v of waiting before a round", waited.Round(time.Millisecond))
	}
	dropCached(e.Dir)
	if err := e.settleSync("before a round", 20*time.Second); err != nil {
		e.Logf("fdatasync probe: %v", err)
	}
}

// settleSync waits, at most bound, until the run's fdatasync probe reads
// quiet seconds again (see syncProbe), and logs a wait longer than the
// probe's own seconds, or a disk that stayed slow.
func (e *Env) settleSync(what string, bound time.Duration) error {
	if e.probe == nil {
		return nil
	}
	waited, slowest, ok, err := e.probe.waitQuiet(bound)
	switch {
	case err != nil:
		return err
	case !ok:
		e.Logf("fdatasync still slow after %v %s: slowest second p99 %v, a quiet second's %v",
			waited.Round(time.Millisecond), what, slowest.Round(time.Microsecond), e.probe)
	case waited > (syncProbeSeconds+1)*syncProbeWindow:
		e.Logf("waited %v for fdatasync to come back %s: slowest second p99 %v, a quiet second's %v",
			waited.Round(time.Millisecond), what, slowest.Round(time.Microsecond), e.probe)
	}
	return nil
}

// dropCached asks the kernel to drop the (written back) page cache of every
// file under dir: the rounds' data stays on disk until the run ends (no
// discards), but not in memory. On this VM a broker's writes grew dearer
// as the kept rounds filled the page cache (2026-12-04, five 6 s
// master + slave runs in a row keeping their data: the slave's CPU per
// message 63, 63, 73, 98, 142 ms per 100k, the master's 129 → 213, the
// producer's, which writes no file, 84-104 throughout; back to 65 and 134
// once the data was removed; realtime/NOTES.md), so later rounds, and the
// wait-slave rounds that write twice, measured the page cache.
func dropCached(dir string) {
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return nil
		}
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		f.Close()
		return nil
	})
}

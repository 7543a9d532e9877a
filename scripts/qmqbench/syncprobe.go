package main

import (
	"fmt"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// A syncProbe times the disk's fdatasync: 4 KiB overwrites of a
// preallocated file, each followed by fdatasync (no block allocation and
// no journal commit: the device's write and cache flush, as a broker
// appending into its zero-filled log sees them).
//
// Why: going quiet (settleDisks) is not enough on the VMs these suites run
// on. After a suite writes a few GiB (store, produce-sizes) the disk does
// no I/O we can see, yet for another 20 s or so its fdatasync p99 reads
// 4-5 ms against 0.3 ms (2026-12-04: the probe after the store suite read
// p90 1-4 ms and p99 4-5 ms for 21 s, then p90 0.2 ms and p99 0.3 ms), so a
// latency suite run in that window measured the earlier suite (e2e p99 33 ms
// against 4-6 ms on its own). The probe's quiet level is taken when the
// run starts; before each suite the run waits until the probe reads near
// it again.
type syncProbe struct {
	f     *os.File
	buf   []byte
	off   int64
	quiet time.Duration // p99 of the quietest of syncProbeBaseline seconds when the run started
}

const (
	syncProbeFile   = 4 << 20
	syncProbeWrite  = 4 << 10
	syncProbeWindow = time.Second
	// A second is quiet when its p99 is at most syncProbeSlack over the
	// quiet level and at most syncProbeFactor times it; syncProbeSeconds
	// quiet seconds in a row end a wait.
	syncProbeSlack   = time.Millisecond
	syncProbeFactor  = 3
	syncProbeSeconds = 2
	// syncProbeBaseline seconds are probed when the run starts; the
	// quietest is the quiet level.
	syncProbeBaseline = 3
)

// newSyncProbe preallocates the probe's file at path (written and synced,
// so later writes overwrite allocated blocks) and measures the quiet level.
func newSyncProbe(path string) (*syncProbe, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(make([]byte, syncProbeFile)); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	p := &syncProbe{f: f, buf: make([]byte, syncProbeWrite)}
	for i := 0; i < syncProbeBaseline; i++ {
		p99, _, err := p.second()
		if err != nil {
			p.close()
			return nil, err
		}
		if i == 0 || p99 < p.quiet {
			p.quiet = p99
		}
	}
	return p, nil
}

// second overwrites and syncs for syncProbeWindow and returns the p99 of
// the syncs and their count.
func (p *syncProbe) second() (time.Duration, int, error) {
	var took []time.Duration
	start := time.Now()
	for time.Since(start) < syncProbeWindow {
		t := time.Now()
		if _, err := p.f.WriteAt(p.buf, p.off); err != nil {
			return 0, 0, err
		}
		if err := unix.Fdatasync(int(p.f.Fd())); err != nil {
			return 0, 0, err
		}
		took = append(took, time.Since(t))
		p.off = (p.off + syncProbeWrite) % syncProbeFile
	}
	slices.Sort(took)
	return took[len(took)*99/100], len(took), nil
}

// limit returns the p99 a quiet second may read.
func (p *syncProbe) limit() time.Duration {
	return min(p.quiet+syncProbeSlack, syncProbeFactor*p.quiet)
}

// waitQuiet probes second by second until syncProbeSeconds seconds in a
// row read at most limit, at most bound. It reports how long it waited, the
// slowest second's p99 and whether the disk came back.
func (p *syncProbe) waitQuiet(bound time.Duration) (waited, slowest time.Duration, ok bool, err error) {
	start := time.Now()
	run := 0
	for time.Since(start) < bound {
		p99, _, err := p.second()
		if err != nil {
			return time.Since(start), slowest, false, err
		}
		slowest = max(slowest, p99)
		if p99 > p.limit() {
			run = 0
			continue
		}
		if run++; run >= syncProbeSeconds {
			return time.Since(start), slowest, true, nil
		}
	}
	return time.Since(start), slowest, false, nil
}

func (p *syncProbe) String() string {
	return fmt.Sprintf("fdatasync p99 at most %v (quiet p99 %v)", p.limit().Round(time.Microsecond), p.quiet.Round(time.Microsecond))
}

func (p *syncProbe) close() {
	name := p.f.Name()
	p.f.Close()
	os.Remove(name)
}

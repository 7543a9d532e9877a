package procs

import (
	"math"
	rtmetrics "runtime/metrics"
)

// SchedLatency follows the Go scheduler's histogram of how long goroutines
// waited runnable before they ran (/sched/latencies:seconds). Not safe for
// concurrent use.
type SchedLatency struct {
	sample []rtmetrics.Sample
	last   []uint64
}

// NewSchedLatency returns a follower; its first Read covers the process's
// life so far.
func NewSchedLatency() *SchedLatency {
	return &SchedLatency{sample: []rtmetrics.Sample{{Name: "/sched/latencies:seconds"}}}
}

// Read returns the mean wait, in seconds, of the goroutines that became
// runnable since the last read, and how many of them the runtime sampled.
func (l *SchedLatency) Read() (mean float64, n uint64) {
	rtmetrics.Read(l.sample)
	if l.sample[0].Value.Kind() != rtmetrics.KindFloat64Histogram {
		return 0, 0
	}
	h := l.sample[0].Value.Float64Histogram()
	if len(l.last) != len(h.Counts) {
		l.last = make([]uint64, len(h.Counts))
	}
	var sum float64
	for i, c := range h.Counts {
		d := c - l.last[i]
		l.last[i] = c
		if d == 0 {
			continue
		}
		lo, hi := h.Buckets[i], h.Buckets[i+1]
		mid := (lo + hi) / 2
		switch {
		case math.IsInf(lo, -1):
			mid = 0
		case math.IsInf(hi, 1):
			mid = lo
		}
		n += d
		sum += float64(d) * mid
	}
	if n == 0 {
		return 0, 0
	}
	return sum / float64(n), n
}

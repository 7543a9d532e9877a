package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// gcFloor keeps the collector's headroom (how much the heap may grow past
// the live heap before the next cycle) at least floor bytes: GOGC is
// percent while percent of the live heap is more than floor, and raised
// to floor's share of it while the live heap is small. A low GOGC keeps
// the resident memory of 10 M pending messages near their live heap
// (pointer-free indexes, cheap to mark), but with a small live heap it
// collects every few megabytes allocated: 10,000 recurring schedules
// firing every second (13 MB live) ran 14 cycles a second at GOGC 25, a
// third of the server's CPU. The percent is re-computed after every cycle
// (a sentinel's finalizer re-arms itself), and set only when it moves by
// more than a tenth.
type gcFloor struct {
	percent int
	floor   uint64
	current int
	sample  []metrics.Sample
}

// startGCFloor sets GOGC to percent and keeps floor bytes of headroom at
// least (floor 0: GOGC stays percent).
func startGCFloor(percent int, floor uint64) {
	debug.SetGCPercent(percent)
	if floor == 0 || percent < 0 {
		return
	}
	g := &gcFloor{percent: percent, floor: floor, current: percent,
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	g.arm()
}

// gcSentinel is garbage from birth: its finalizer runs after the next
// cycle.
type gcSentinel struct {
	g *gcFloor
	_ [16]byte // not a tiny allocation (those are batched and may never be freed)
}

func (g *gcFloor) arm() {
	runtime.SetFinalizer(&gcSentinel{g: g}, func(s *gcSentinel) { s.g.cycle() })
}

// cycle runs after a collection: it sets the percent for the live heap the
// cycle found and re-arms.
func (g *gcFloor) cycle() {
	metrics.Read(g.sample)
	if g.sample[0].Value.Kind() == metrics.KindUint64 {
		if want := g.percentFor(g.sample[0].Value.Uint64()); want*10 > g.current*11 || want*10 < g.current*9 {
			g.current = want
			debug.SetGCPercent(want)
		}
	}
	g.arm()
}

// percentFor is the GOGC giving at least floor bytes of headroom over live.
func (g *gcFloor) percentFor(live uint64) int {
	const maxPercent = 10_000
	if live == 0 || g.floor/live >= maxPercent/100 {
		return max(g.percent, maxPercent)
	}
	return max(g.percent, int(g.floor*100/live))
}

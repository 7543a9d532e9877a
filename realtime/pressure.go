package realtime

import (
	"time"

	"github.com/qmq-go/qmq/pkg/procs"
)

// pressureLoop tells the fair share, every Window, whether the broker was
// short of CPU over the last one: its goroutines waited for a processor
// longer than FairShareOptions.Busy on average (the Go scheduler's
// /sched/latencies, procs.SchedLatency), or its threads waited for a CPU in the
// kernel's run queue longer than RunQueue seconds a second (runQueueWait,
// Linux). It is the busy signal of pulls served inline on the event loop,
// which wait in no queue of the broker's (see "Inline pulls" in doc.go).
// It stops with the master's term t.
func (b *Broker) pressureLoop(t *term) {
	defer t.wg.Done()
	opts := b.opts.FairShare
	tick := time.NewTicker(opts.Window)
	defer tick.Stop()
	lat := procs.NewSchedLatency()
	lat.Read()
	lastWait, runQueue := runQueueWait()
	runQueue = runQueue && opts.RunQueue > 0
	lastAt := time.Now()
	for {
		select {
		case <-t.stop:
			return
		case now := <-tick.C:
			pressed := false
			if mean, n := lat.Read(); n > 0 && mean > opts.Busy.Seconds() {
				pressed = true
			}
			if runQueue {
				if wait, ok := runQueueWait(); ok {
					if elapsed := now.Sub(lastAt); elapsed > 0 && float64(wait-lastWait) > opts.RunQueue*float64(elapsed) {
						pressed = true
					}
					lastWait = wait
				}
			}
			lastAt = now
			if pressed {
				b.fair.pressed(now)
			}
		}
	}
}

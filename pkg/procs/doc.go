// Package procs sizes the Go runtime's processors (GOMAXPROCS) to a
// server's load: one while one keeps up, all of them once it is saturated.
// qmq-realtime runs a Governor with --adaptive-procs (off by default: see
// "Status" below).
//
// With two or more processors the runtime wakes an idle thread to look for
// work whenever a goroutine becomes ready, so a lightly loaded server that
// hands work between goroutines (an event loop, an appender, a syncer) pays
// a thread wake-up, and on a virtual machine a hypervisor exit, at each
// hand-off, and its answers wait behind those wake-ups. On one processor
// the hand-offs stay on one thread. Measured on a 2-vCPU VM with the
// realtime broker at a steady 20,000 msg/s with durable flush (the latency
// suite, three alternating pairs, GOMAXPROCS=1 set for the whole process):
// send-to-handler p50 0.68–1.73 ms and p99 3.8–5.9 ms on one processor,
// 1.45–1.99 and 7.9–9.4 ms on two. But one processor caps the process at
// about a core: the produce suite lost a third of its rate.
//
// Every Window the Governor reads the CPU time the process used
// (getrusage) and the mean time its goroutines waited for a processor
// (SchedLatency). On one processor, a Window with Up cores used, or with
// half a core used and goroutines waiting UpLatency on average, switches to
// Max at once: a saturated processor does not always show a full core of
// CPU time (the producing broker used 0.85–0.9 on one and lost a quarter of
// its rate while a CPU-only switch waited), but its goroutines queue. On
// Max, DownAfter Windows in a row under Down cores switch back to one; Down
// (1.2) is above one core because the same load costs more CPU on Max (the
// wake-ups), and a process that comes straight back up waits twice as long
// before its next try. A switch is runtime.GOMAXPROCS, which stops the
// world for a few microseconds. The Governor starts on one processor.
//
// # Status
//
// Measured on 2026-12-01 (same VM, alternating suite runs against the
// broker without it): latency suite p99 6.0, 6.2, 6.9, 9.5 ms against 8.1,
// 10.6, 13.5 (p50 0.83–1.92 against 1.56–1.97); produce suite 483k msg/s
// against 448k; the replication suite's wait-slave ratio 0.607 against
// 0.558. Two full runs of the realtime suites with it on: produce 513k and
// 481k msg/s, consume 833k and 934k, sync ratio 1.10 and 1.20, e2e p99 6.15
// and 9.79 ms, subjects 0.80 and 0.85, scaling 7.06 and 6.59, fairness
// 0.507 and 0.465; the same hour without it: e2e p99 9.79 and 9.84, sync
// 0.84 and 0.95, fairness 0.529 and 0.555, and in a run right after the
// second (without it) e2e p99 8.07 ms, sync 1.09, scaling 7.04 and
// fairness 0.465 again, its small group alone at 612k msg/s: the
// differences are within these suites' noise on this machine, and the
// latency gain that looked clear in the latency suite's pairs did not hold
// in full runs. So it stays off by default; what would settle it is many
// alternating pairs of each suite, not one run each.
package procs

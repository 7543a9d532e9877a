// Package procs sizes the Go runtime's processors (GOMAXPROCS) to a
// server's load: one while one keeps up, all of them once it is saturated.
// qmq-realtime runs a Governor unless started with --adaptive-procs=false
// or GOMAXPROCS set (see "Status" below).
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
// (SchedLatency). On one processor, UpAfter (2) Windows in a row that each
// used Up cores, or UpLatencyCores (0.3) with goroutines waiting UpLatency
// (1 ms) on average, switch to Max: a saturated processor does not always
// show a full core of CPU time (the producing broker used 0.36–0.56 on one,
// its goroutines waiting 2.6–4 ms), but its goroutines queue; a broker
// keeping up with a steady 20,000 msg/s used 0.3–0.5 cores with waits of
// 0.13–0.48 ms (an earlier 200 µs threshold sent it to two processors). On
// Max, DownAfter Windows in a row under Down cores, with goroutines waiting
// under DownLatency (150 µs) on average, switch back to one (on two
// processors the producing broker used under a core but its goroutines
// still waited 100–500 µs; the steady load waited 36–95 µs); Down
// (1.2) is above one core because the same load costs more CPU on Max (the
// wake-ups), and a process that comes straight back up waits twice as long
// before its next try. A switch is runtime.GOMAXPROCS, which stops the
// world for a few microseconds. The Governor starts on one processor.
//
// # Status
//
// On by default in qmq-realtime since 2026-12-02. What decided it: the
// broker on two processors spent 0.8 of a core at the latency suite's
// 20,000 msg/s, a fifth of it in the runtime's sysmon thread polling every
// 20 µs (a blocking fdatasync restarts its fast polling) and much of the
// rest in threads woken to find nothing to run; on one, 0.35 of a core.
// With the message log zero-filled ahead (realtime/store doc.go, Zero
// filling), alternating latency runs gave e2e p99 3.3, 3.4 and 5.3 ms with
// the governor against 7.8, 20 and 9.0 ms without it, and the first full
// run of the realtime suites with both (same VM): e2e p50 0.67 ms, p99
// 3.79 ms, produce 452k msg/s (2.46× nsqd), consume 615k, sync 1.33× nsqd,
// subjects 0.88. The fairness suite, where the broker uses ~0.55 cores,
// gave 0.451 and 0.382 with it against 0.496 and 0.420 without in
// alternating runs: within that suite's noise (0.38–0.55 that hour).
//
// Earlier (2026-12-01, the first version, switching up on 200 µs waits and
// without zero filling), in alternating suite runs against the broker
// without it: latency suite p99 6.0, 6.2, 6.9, 9.5 ms against 8.1, 10.6,
// 13.5; produce 483k msg/s against 448k; the replication suite's
// wait-slave ratio 0.607 against 0.558; in full runs the latency gain did
// not hold (e2e p99 6.15 and 9.79 ms), and it stayed off by default then.
package procs

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
// the hand-offs stay on one thread, but one processor caps the process at
// about a core (the produce suite lost a third of its rate).
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
// On by default in qmq-realtime since 2026-12-02 (at the latency suite's
// load the broker on one processor spent under half the CPU it spent on
// two, and its e2e p99 fell); the runs that decided it: NOTES.md.
package procs

// Package realtime is the realtime broker: the master of one broker group.
// It stores messages in a realtime/store and serves them to consumer groups
// with no partitions: every consumer of a group pulls from the group's one
// cursor, and the store records each delivery in that consumer's pull log.
//
// # Send
//
// A send request carries a batch of encoded messages. Each is checked (CRC,
// limits, subject) and gets its own status. A message whose (subject, id,
// attempt count) was stored within the dedupe window (default 10 minutes,
// bounded by a capacity of remembered ids) is answered StatusDuplicate
// without being stored again, so a producer's retry or a delay server's
// re-forward does not make a copy; a restarted or promoted master reads the
// window's ids back from its log (see Known limits below). The rest go to
// the store in one append;
// the reply goes out from the store's commit callback once they are durable
// (group commit under the default sync flush). Requests up to 64 KiB are
// checked on the event loop itself (never blocking). Under --flush=async,
// when nothing else is appending, the store writes them at once
// (store.TryWriteViewsNow, given the messages as parsed for the checks)
// and the reply leaves with the loop's write at the end of the read: a lone
// send crosses no goroutine, as nsqd's PUB does not, and allocates nothing
// (its call state is pooled). The records are in the log before the reply
// (a killed broker keeps them); indexing them, waking their consumers and
// the metrics wait until the reply is written (netserver's AfterWrite,
// store.PublishWritten): the producer has its answer first. The store's writer
// stays held across that write (a few microseconds): on a server with
// several event loops, a send another loop brings meanwhile finds it held
// and takes the queued path, which batches. Every stored message costs a lookup in the
// dedupe table, which is big and seldom cached: its two generations share
// one array (one cache line per lookup), on transparent huge pages where
// the kernel offers them (no TLB miss). A request's messages are parsed and
// hashed first, then their slots are read in one tight loop of independent
// loads (dedupe.touch) and only then reserved, so a batch's cache misses
// overlap: reserving each message as it was parsed waited out one miss
// after another, ~15% of a master's CPU when producing (perf), and the
// master's CPU per stored message fell by 12–14% (three alternating pairs
// of 3,000,000 sends).
// Otherwise the request is detached and queued (TryAppendAsync); bigger
// ones, and any that meet a full append queue, go to a goroutine.
//
// # Pull
//
// Every pull goes to the actor of its (subject, consumer group) — broadcast
// subscribers have one actor each — on a shared pool of workers
// (pkg/actor). An actor runs at most a time slice (default 5 ms) before it
// yields to the back of the run queue, so a group with 64 consumers flooding
// pulls takes turns with a group of 2. A pull that finds no message waits in
// its actor (long polling) until new messages of the subject are appended
// (the store's OnAppend wakes the subject's actors with waiting pulls), its
// wait ends (answered empty) or the broker closes. A pull that sat in an
// actor's mailbox past its wait plus PullGrace is answered
// StatusRetryLater: the client has given up on it, so the broker sheds it
// instead of doing stale work. A full mailbox answers StatusBusy at once.
// Pulls of retry subjects do not hand out messages before they are due.
//
// A consumer may keep more than one pull in flight (consumer.PullDepth):
// the pulls it sends before the first one's answer carry
// protocol.PullPipelined, and the store hands them new messages only (a
// plain pull re-delivers the consumer's un-acked entries above its
// KnownPullSeq, which are exactly the ones still on their way). One
// connection's pulls reach the actor in order and are answered in order.
// Counted in qmq_realtime_pulls_pipelined_total. Measured on the consume
// suite (one consumer, per-message ack): 685k → 910k msg/s with two pulls in
// flight instead of one, as the broker's answer no longer waits behind the
// consumer's handling of the batch before it.
//
// # Fair share
//
// Time slices share the pull workers, but not what lies around them: a
// group with 64 consumers has 64 connections' worth of requests in the
// broker's goroutines and event loop, and its consumers' processes compete
// with the others' for the machine. So the broker also shares deliveries
// (fairshare.go, Options.FairShare). Every pull actor (a flow) tallies, over
// a sliding window (default 100 ms), the messages it delivered, its pulls
// and how long they waited between arriving and their actor taking them. A
// flow contends while its pulls are hungry: one asked for a full batch (at
// least half the most one of its pulls asked for) and got all of it, so its
// consumers had room and a backlog was there. A group at the tail of its
// subject gets less than it asks for, and a group whose handlers are its
// limit asks for the few messages they just finished: neither contends, so
// neither causes holds nor suffers them. When two or more flows contend and
// the others' pulls waited in the broker longer than Busy on average
// (default 50 µs: the broker is busy), a flow that delivered more than
// Excess (default 1.1) times the mean of the others has each new pull held:
// it waits in its actor like a long poll, looks at the shares again every
// fiftieth of Hold (1 ms) and is served once its flow is back within its
// share, or when Hold (default 50 ms) runs out. Held pulls are counted in
// qmq_realtime_pulls_held_total. Comparing a flow with the others' mean (not
// with the mean of all) means that of two flows only the heavier can ever be
// held. A pull that may not wait longer than Hold is not held. A pull that
// arrives while an earlier pull of the same consumer waits in the actor
// waits behind it (pullCall.after), so a pipelined pull never overtakes a
// held one: a consumer's pulls take entries in the order it sent them.
//
// Two refinements keep the holds steady (fairshare.go). The busy gate
// lingers: once the others' pulls waited past Busy, shares stay enforced
// for the flow for ten Windows (busyLinger) after they last did. Holding a
// flow takes load off the broker, so the others' waits drop at once; judged
// afresh at every look the gate opened and closed around Busy, the held
// flow was let go each time it opened, and it took ~2× the others'
// messages. And flows with a pull held right now are left out of the
// others' mean (a flow found over the others' mean is held only if it is
// also over the mean of the flows not held): a held flow delivers less
// because it is held, not because it is deprived, and a flow compared with
// it would be held in turn, the two taking turns waiting out rechecks (seen
// as the flood held to the small group's pace and the small group held to
// the flood's).
//
// A held flow pays for its holds (FairShareOptions.HoldCharge, default 64
// messages a held pull). A held pull is parked in its actor, timed, looked
// at again every recheck and answered by a pull worker off the event loop:
// beside the flood each cost the broker about twice what an inline pull of
// 64 messages does (below), and a flow pulling over its share keeps
// making that work. Charging it, as quotas count the requests a throttled
// client keeps sending, holds the flood to less than the small group's
// deliveries. The charge feeds on itself (a flow held more pays more) but
// is bounded by the flow's pulls: with every pull held and b messages a
// pull, a flow pays (b+64)/b for each message (twice with the fairness
// suite's batches of 64, so it is held to about half the others'
// deliveries; a flow pulling a few messages at a time pays more, as its
// pulls cost the broker more). A flow that is not over its share is never
// held and never charged; two floods alike are held and charged alike.
//
// Measured on 2026-12-02 (fairness suite, a debug build that charged 64
// messages for every pull answered off the loop, held or not, against no
// charge, alternating): the flood took 0.77–0.85 times the small group's
// deliveries against 0.93–1.10, its process's CPU beside the small group
// fell from 0.50–0.53 to 0.42–0.50 cores and the small group's rose from
// 0.58–0.62 to 0.61–0.66; fairness_small_group_ratio 0.502, 0.569, 0.612,
// 0.626, 0.538, 0.556 (mean 0.567) against 0.524, 0.535, 0.551, 0.491,
// 0.624, 0.452, 0.631 (mean 0.544), the host's swings between cycles
// (the small group alone at 1.40–2.05 µs a message) being most of the
// spread. Charging only held pulls is what shipped: a pull answered by a
// worker without being held costs little more than an inline one on an
// otherwise quiet broker (one group of 2 consumers alone, inline pulls on
// and off: 0.92–1.08 µs of broker CPU a message either way), so the cost
// worth charging is the hold's. With the hold charge as shipped (suite
// runs alternating with --fair-share-hold-charge=0): ratios 0.609 and
// 0.630 against 0.538 and 0.602, the flood's process at 0.44–0.45 cores
// against 0.52–0.53.
//
// What a small group's pulls wait on beside a flood (a debug measurement
// in the fairness suite, broker with GOMAXPROCS=2): alone, a pull waited
// ~20 µs between arriving and its actor taking it and ~28 µs more until
// its answer was made; flooded, ~100 µs and ~45 µs, and 1–2% of its pulls
// were held (the flood, held half the time, then delivered less than it).
// Its consumers' round trips meanwhile went from ~285 µs to ~670 µs: most
// of the rise is outside the actors (the three processes sharing two
// cores). With two actors and 4×GOMAXPROCS pull workers the scheduler's run
// queue never keeps the small group's actor behind the flood's, so
// ordering that queue by share would change nothing; yielding the
// processor after each delivering pull (runtime.Gosched) did not help
// either. Pulls are decoded on the event loop and go detached straight to
// their actor (servePullInline), one goroutine hand-off fewer per pull.
//
// The cost: a contending group is held to about the pace of the others,
// whatever keeps them slow, while the broker is busy; a group on a slow or
// far machine that asks for full batches slows a fast group beside it to
// about its own pace (but never below a full batch per consumer per Hold).
// On an idle broker (the Busy gate) nothing is held. Hold 0 turns fair
// sharing off.
//
// Measured (TestTiming_FairShareHoldsTheFlood, clients and broker in one
// process): a group of 16 consumers beside a group of 1 took 0.97–1.07× the
// small group's messages, against 12–15× with Hold 0, and the small group
// drained twice as fast (0.39–0.41× since the hold charge, with its pulls
// of 32). The fairness suite (scripts/bench.sh fairness: the
// broker, the 2-consumer group and the 64-consumer flood as three processes
// on the shared 2-core machine, alone and flooded phases alternating) at
// load averages of 7–16 from other work: fairness_small_group_ratio 0.54,
// 0.62, 0.52, 0.48, 0.44, 0.47, 0.54, 0.42 with the defaults, 0.39, 0.46,
// 0.37, 0.41 with --fair-share-hold=0 in the same hour; at load averages of
// 3–5: 0.50, 0.50, 0.45 (the small group ~500k msg/s alone, ~250k
// flooded). At the broker the two groups then get about equal deliveries,
// so the small group gets half of what the three processes deliver
// together, and that total is about what the broker and the small group
// deliver alone (the broker's read-back, CRC and socket writes and the
// clients' own work fill the cores either way). The ratio passes 0.5 only
// when the machine has CPU to spare for the second group; beyond that the
// lever is the cost per message, and only the broker's: alone, the small
// group is bound by its own process (one core: ~0.9 CPU at ~1.3–1.5 µs a
// message, the broker at ~0.6 CPU and ~0.8–0.9 µs), while flooded the three
// processes share the cores (~0.6 CPU each, ~10% idle). So the ratio goes
// as the client's cost over the client's and the broker's together: a
// cheaper client raises the alone rate more than the flooded one and
// lowers the ratio; a cheaper broker raises it. Measured on 2026-11-30
// (manual runs beside the suite): acks are ~12% of the broker's cost per
// message and ~5–9% of the client's (a consumer that acked only every
// 5 ms), so sending them with pulls would move the ratio by 1–3%; the
// broker's read-back (pread) and reply copy are ~14% of its CPU. Reading
// the message log through a read-only mapping instead of pread (an
// experiment) cut the broker's CPU per message by 9% and lowered the
// ratio (0.471, 0.432, 0.457 against 0.484, 0.481, 0.512): with less
// copying in the broker the small group's own process ran faster alone
// too (0.83 against 0.90 µs a message), so the shared caches and memory
// bandwidth tie the two costs together. 23 suite runs that day: 0.447–0.543,
// mean 0.497 (standard deviation 0.023), 11 of them at or above 0.5. The
// suite prints each process's CPU per phase.
//
// The split is the lever, and it is even by every cost measured: a debug
// build that counted the flood's deliveries 2.5 times (holding it to ~0.4
// of the small group's pace) raised the ratio from 0.45–0.49 to 0.61–0.67,
// while actor time and broker CPU per delivery are the same for both groups
// (0.56 µs of actor time; 1.0 µs of broker CPU each alone), the small
// group's pulls are almost never held (4 of ~55,000) and 58% of the
// flood's are. Beside the flood the small group's process is idle 38% of
// the time in gaps of ~165 µs while its threads queue 0.7 s/s for a CPU
// and 11–13% of the CPU stays idle: it waits to be scheduled, not on the
// broker's policy. Pacing held pulls back out, PullDepth 4 and a 5 ms
// recheck changed nothing. Pipelined pulls (consumer.PullDepth 2) lowered
// the ratio to 0.455–0.473: the small group alone no longer idles between
// answers (~0.99M → 1.11M msg/s) while beside the flood it stays bound by
// its CPU share (~478k → 504k msg/s).
//
// Session of 2026-11-30 (evening), suite runs unless said otherwise. The
// suite's CPU line explains each run's ratio as (the small group's cores
// beside the flood / alone) × (its CPU per message alone / beside the
// flood): ~0.62 × ~0.78. The second factor is the client's cost rising
// 22–35% beside the flood, and most of that rise is the Go collector:
// the 2-consumer process (GOMAXPROCS=1, ~2 MB live, ~300 collections a
// second at the 4 MB minimum goal) spends ~0.33 µs a message on it alone
// and 0.42–0.51 beside the flood, where its processor idles between
// answers and the runtime fills the idle time with idle-priority marking
// (gctrace: 0.19–0.23 µs a message of idle marking beside the flood, 0.01
// alone) and, with a lower goal, runs ~30% more cycles per message. A
// client that collects less does not help: GOGC=800 for both client
// processes raised the small group's rate alone and beside the flood alike
// (ratios 0.45/0.37/0.40/0.45 against 0.47/0.46/0.34/0.43 at GOGC=100,
// rig runs), as the cost model above says of any cheaper client. Five
// alternating pairs with Excess 1.0 against 1.1: 0.506, 0.481, 0.433,
// 0.453 against 0.486, 0.452, 0.454, 0.467, 0.505 (noise). PullDepth 4
// for the small group raised both rates again (ratios 0.49/0.42/0.47
// against 0.51/0.46/0.49 at depth 2). Serving pulls on the event loop
// (see "Inline pulls" below; first as an experiment with the Busy gate
// off) cut the broker's CPU per message by ~14% (0.49 against 0.57 cores
// alone at the same rate) and raised the ratio by ~0.03 (0.493, 0.510,
// 0.503 against 0.477, 0.462, 0.482 in alternating runs); with the gate
// on and nothing else the flood went unheld (0.33–0.35): inline pulls wait
// for nothing, so the others' waits that open the gate vanished.
//
// Session of 2026-12-01. Pull answers are appended straight into the
// reply buffer (replyPulled, netserver.Request.ReplyAppend; before, a slice
// of ~130 slices per answer was walked twice and copied) and pulls view
// the read-ahead buffer instead of copying out of it (store's
// messageReadAhead): the broker's CPU per delivered message on the rig
// (flood and small group side by side, four alternating pairs) fell from
// 0.708 to 0.646 µs (−9%) with the first, and by ~3% more with the second
// (within the rig's noise; perf shows the copy gone). Suite runs that day:
// 0.497, 0.490, 0.484, 0.533, 0.527, 0.474 before, 0.560, 0.508, 0.477,
// 0.492, 0.546, 0.508 after (the model's +0.02 is inside the noise). The
// split itself, measured on the rig beside the flood: the flood took
// 1.094–1.096 times the small group's deliveries at Excess 1.1 and
// 1.066–1.078 times at Excess 1.0 (three runs each), so a stricter Excess
// would give the small group ~1% more. And the flooded phase leaves the
// machine 12% idle (/proc/stat: user 65%, system 19%, softirq 4%, idle
// 12%, steal 0): all three processes wait on one another's answers at
// once, the wake-ups across the two vCPUs in between. Holding the flood
// makes that idle time: with Hold 0 the machine was 4.5–6.6% idle on the
// same rig (the flood then took 1.5–2.3 times the small group's
// messages). Answering inline pulls on the loop (see "Inline pulls") cut
// the broker's cost again; in three alternating suite pairs the two client
// processes then got more of the machine (0.61–0.64 cores each beside the
// flood against 0.57–0.59) and both groups delivered more on the rig
// (~+17% together beside the flood), but the small client's CPU per
// message rose with its rate (1.47–1.55 against 1.36–1.43 µs) and its rate
// alone rose too, so the ratio stayed where it was (0.487, 0.530, 0.493
// against 0.502, 0.482, 0.504). Most of a run's noise is in the phase the
// broker cannot help: in one full run the small group alone swung from
// 0.86M to 1.28M msg/s between cycles (its own single processor on a
// shared host) while beside the flood it stayed at 0.45–0.56M, and the
// cycle at 1.28M gave 0.35. What is left and flood-only is the held pulls'
// path: ~15% of the pulls beside the flood, each costing the broker about
// twice an inline one (a timer, a worker's wake-up, the off-loop reply).
//
// Measured again on 2026-12-01 (a debug build counting deliveries by path,
// and perf on the broker beside the flood): pulls answered by a worker
// (held ones, and the flood's pulls queued behind them) carried 31% of all
// deliveries, every pull 64 messages; their store work per pull cost the
// same as an inline pull's (Store.Pull samples per pull within 15%). What
// the worker path adds is the hand-off: the off-loop reply's flush (5.6% of
// the broker's samples), the Go scheduler's wake-ups (5.6%), futexes
// (3.5%) and the recheck timers (~3%), so ~15% of the broker's CPU beside
// the flood, which by the cost model is worth ~+0.02 of the ratio. The
// broker's CPU per delivered message was 0.68 µs beside the flood against
// 0.54 µs with the small group alone. Giving the broker's threads a shorter
// scheduler slice (EEVDF's sched_runtime, 0.1 ms against the default
// 1.4 ms; a latency hint that keeps their CPU share) lowered the small
// group's rate alone by ~8% and left it beside the flood unchanged: not a
// gain for the group, so not adopted.
//
// Measured later on 2026-12-01 (rig, an experiment): charging each group's acks
// to its share as well as its deliveries, as request-time quotas charge a
// client for its requests, would hold a group that costs the broker more
// per message. It changed nothing: at 10 messages an ack the flood still
// took 1.080–1.086 times the small group's deliveries, against
// 1.085–1.093 without the charge, because the two groups send about as
// many acks per message (a held flood's consumers finish their messages in
// bursts and ack them 100 or more at a time). Of the costs that differ
// between the groups, only the held pulls' path is left, and holding is
// what a charge for it would add more of. The flood's own process spends a
// quarter of its CPU in the Go collector (pointer scanning of its 64
// consumers' pull batches), as much per message as the small group's.
// Beside a plain CPU hog instead of the flood (one spinning thread, no
// pulls; same rig, same backlog) the small group kept 0.61 of its rate
// alone and its CPU per message rose ~15% (1.02 → 1.17 µs); beside the
// flood it rose 37% (1.12 → 1.54 µs, the suite's line). So about a third
// of the rise is sharing the CPUs at all, and the rest comes with the
// flood's traffic through the same broker: answers that come later, a
// process that idles between them, and the collector's idle marking and
// the wake-ups that fill those gaps.
//
// # Inline pulls
//
// A pull goes from the event loop that decoded it to its group's actor, and
// its answer from the actor's worker back to the loop to be written: two
// hand-offs between threads, each a wake-up (a futex, an eventfd). With
// Options.InlinePulls (default on) a pull whose actor is idle (mailbox
// empty, not queued or running: actor.RunInline) is handled on the loop
// itself, as a worker would handle it, and its answer goes out with the
// read's own write (the loop's reply buffer, no lock, no task for the
// loop). A pull that must wait (a long poll, a fair-share hold) is
// detached when it parks in its actor and a worker answers it; pulls that
// arrive while the actor runs go to its mailbox. (Until 2026-12-01 every
// inline pull was detached first, so its answer took the off-loop path: a
// locked buffer, a task queued on the loop with an eventfd write to wake
// it, and a write of its own; answering on the loop cut the broker's CPU
// per delivered message on the fairness rig by ~5%, 0.613 → 0.579 µs in
// three alternating pairs.)
//
// The loop must not wait on the disk: a pull whose inline run read from a
// block device (its messages or entries were not in the page cache: the
// thread's ru_inblock, getrusage RUSAGE_THREAD, Linux) or took longer than
// 20 ms sends its group's pulls to the workers for a second
// (qmq_realtime_pulls_inline_slow_total), so a group reading a cold backlog
// costs its loop one disk read a second, not one per pull. (Wall time alone
// cannot tell: beside the flood, inline runs descheduled for over a
// millisecond sent the flood's pulls back to the workers most of the time.)
//
// Fair share must still see that the broker is busy, and an inline pull
// waits in no queue of the broker's. So pulls of a group contending with
// others go through the workers while the busy gate is closed for it (their
// waits can open it) and inline once it is open (fairShare.inlineOK); and
// pressureLoop opens it on two more signals, sampled every Window: the Go
// scheduler's mean latency over Busy (goroutines waiting for a processor:
// the broker short of processors, as with clients in its own process,
// measured 135–640 µs beside a flood in one test process against ~7 µs
// alone) and, on Linux, the broker's threads waiting in the kernel's run
// queue over FairShareOptions.RunQueue (default 0.4) seconds a second (the
// machine short of CPUs for the broker: /proc/self/task/*/schedstat,
// measured on the fairness rig at 0.14–0.16 beside the small group alone
// and 0.81–0.82 beside the flood, where the Go scheduler's mean latency was
// only 3 µs against 10–22 µs).
//
// Measured (fairness suite, three alternating pairs of the old and new
// broker): the broker's CPU at the same rates went from 0.54–0.58 to
// 0.49–0.50 cores with the small group alone and from 0.62–0.63 to
// 0.57–0.58 beside the flood, where 95% of the pulls then ran inline
// (qmq_realtime_pulls_inline_total against the pull requests on the rig);
// fairness_small_group_ratio 0.455, 0.516, 0.514 against 0.548, 0.492,
// 0.452: within the noise, as the cost model of "Fair share" expects of a
// ~10% cheaper broker (about +0.02).
//
// # Ack
//
// Acks are inclusive ranges of a consumer's pull sequences; an empty range
// is a heartbeat. Acks above a gap mean acks were lost: the gap's messages
// are stored again on the group's retry subject, due after RetryDelay (a
// gap of more than 4,096 entries goes back to the group instead, logged:
// see realtime/store, "Consumer groups"). The
// release flag (a consumer closing) hands the consumer's un-acked messages
// back to the group at once. A consumer that neither pulls nor acks for the
// consumer timeout (default 30 s) loses them the same way (livenessLoop).
//
// Acks are served on the event loop when they can be (serveAckInline): a
// heartbeat, and an ack that store.TryAck applies without waiting (no gap,
// no unknown pull sequences, the group's lock free: a few map lookups and
// an action record appended in memory), are answered with the read's
// write. The rest (a release, a broadcast ack, a gap, a group whose lock a
// pull holds) go detached to a goroutine of their own. Served like other
// requests, an ack cost the broker about 15 µs, most of it the hand-off to
// a serve goroutine and back to the loop for the reply; at the consume
// suite's ~5,000 acks a second that was ~12% of the broker's CPU per
// message.
//
// # Replication
//
// A broker is its group's master or its slave (Options.Role is the role it
// starts in). With meta servers and no fixed Options.Master the group's role
// loop (pkg/failover: election, eligible set, write gate, takeover,
// switchover; its doc.go has the safety argument case by case) changes the
// role in place (term.go): a promotion promotes the copy's store where it is
// (store.Promote), a demotion closes the master's store and reopens it as a
// copy. A slave with a fixed Master never runs for master; a master without
// meta servers is always writable.
//
// A slave opens its store as a replica (see realtime/store, "Replication"),
// refuses sends, pulls, acks, consumer management and dead-letter commands
// with StatusNotMaster (naming its master), and runs replicaLoop, which
// syncs from the group's master. Each CmdSyncLog request carries the
// slave's group and broker id, its segment sizes, the ends of what it has
// received of both logs (where to read from), its durable message-log end
// (its acknowledgement) and the lease stamp of the latest answer (async
// failover's slave lease). The master (syncService, sync.go) answers with up
// to SyncMaxBytes of each log's records past those offsets (pkg/protocol
// sync.go): the action log's committed records, the message log's written
// ones (a tentative tail, below), long-polling on the store's CommitSignal
// up to SyncWait (at most half of SuspectAfter) when it has nothing new. The
// slave keeps one fetch in flight while it writes the chunk before at the
// same offsets: the message-log part first (fdatasync, replay), then it
// acknowledges at once with a one-way request (MaxBytes 0), so an
// acknowledgement never waits for a long poll nor for the action-log part,
// which it writes after. Bad requests get clear errors: undecodable, past
// the written end or not at a record start → StatusBadRequest; another
// group or different segment sizes → StatusInvalid; a sync to a slave →
// StatusNotMaster. Failures back off 50 ms → 1 s.
//
// Tentative tail. Under FlushSync the master publishes a commit group only
// after its fdatasync; the master therefore serves message-log records as
// soon as they are written (store.ReadMessageTailInto), so its fdatasync and
// the slave's overlap; a reply still waits for both. The response's End
// stays the master's committed end: the slave writes and fdatasyncs the
// records past it (and acknowledges them) but indexes them only once a later
// End passes them (store.ReplicateMessages), so its consume logs and
// checkpoints hold durable master records only, and a promotion indexes the
// tail first (the old master may have answered its senders). A failed write
// or fdatasync makes the master's store cut its log back to its committed
// end and write other records at the same offsets; the store records every
// cut, with a generation, before it truncates (store.MessageCuts). The sync
// service reads the tail only between two equal generations and keeps the
// cuts as its own generations, the first being where this term began (the
// recovered end of a store opened as a master's, the promotion point of one
// promoted in place). A pending cut is the lowest cut a copy may reach past:
// a fetch from past it is answered with the cut (no data), and a fetch from
// at or below it clears it. The slave cuts its tail back in place
// (store.CutReplicaTail) and asks again with the generation it was told; a
// request's durable end counts only up to the lowest cut after the
// generation it names, and await applies the store's cuts before its fast
// path. A cut below what a copy has indexed is a truncation (below). One
// window remains open: a master that cuts its log, writes other records and
// dies before its slave's next answer leaves the promoted slave holding the
// cut records where the rejoining old master holds the replacements; neither
// side's records there were acknowledged, so nothing acknowledged is lost,
// but the copies differ there.
//
// Waiting for the slave (--wait-slave, Options.WaitSlave): while the role
// loop counts on a slave (failover.Server.WaitSlave: its eligible slave, or
// one joining) a send's reply waits until the slave's durable message-log
// end passes the last stored message's offset. Waiting replies are kept
// ordered by offset and completed as acknowledgements arrive (await runs on
// the store's commit goroutine and only takes a mutex). With MaxWaitingAcks
// replies waiting, new sends get StatusBusy. A resent copy of a message
// whose first reply still waits for the slave (or failed waiting) is
// answered StatusBusy, not StatusDuplicate, until the slave holds the first
// copy: a duplicate answer acknowledges too. When the eligible slave is gone
// (its connection closed, silent for SuspectAfter, or lagging
// SlaveLagReadonly) the role loop removes it from the eligible set and the
// replies complete (serving alone), or, while it cannot or under
// --slave-down=readonly, fails them and new sends with StatusReadonly (stored
// on the master only: a retry elsewhere may make a duplicate). A master
// without a role loop (no meta servers) turns readonly by itself when its
// slave lags past SlaveLagReadonly. Without --wait-slave (async) a master
// never waits for its slave; with an eligible slave its acknowledgements are
// bounded by its leases (pkg/failover), checked again when it replies.
//
// Epochs and rejoin. The epoch history (pkg/failover History, file "epochs"
// in the data directory) lists the epochs that wrote the logs, each with the
// offsets it started at; a master appends its epoch at its committed ends
// before it takes a write in it, a slave takes its master's history before
// it copies anything of that epoch. Before copying, a slave sends its
// history (CmdSyncEpoch); the master answers with its own and the point
// where the slave's copy stops agreeing with its logs (failover.Divergence).
// A copy past that point (an old master's records the new master never got)
// is cut back: the broker closes the copy, store.Truncate cuts both logs and
// drops what it cannot keep, and the copy reopens and converges byte for
// byte. A send carrying a newer epoch than the master's own is refused with
// StatusStaleEpoch; sync requests and answers must carry the epoch the slave
// agreed on.
//
// Status: Broker.Replication (role, epoch, write state, eligible slave,
// slave offset, lag, waiting acks) and the metrics
// qmq_realtime_slave_offset_bytes, _slave_lag_bytes, _slave_lag_seconds,
// _waiting_acks, _serving_alone, _slave_lag_readonly, _fenced,
// _sync_bytes_served_total on a master, qmq_realtime_replication_lag_bytes,
// _replication_lag_seconds, _replication_errors_total on a slave,
// qmq_realtime_role and _epoch on both, and the role loop's qmq_failover_*.
//
// Known limits: state outside the logs is not replicated — consumers that
// never got an entry (the dead-letter re-drive/purge record is in the log:
// tombstones in the dead subject, deadletters.go); a slave whose action log
// is behind the master's first kept action-log offset (ErrReplicaGap) needs
// a fresh copy (a snapshot, CmdSyncCheckpoint, is not built). The dedupe
// table is not replicated: a master term fills it from the newest messages
// of its log in the background (seedDedupeLoop,
// qmq_realtime_dedupe_seeded_ids). Measurements: NOTES.md.
//
// # Metrics
//
// /metrics on the HTTP port serves, besides the Go runtime's and the
// process's series, counters and histograms tallied as the broker works
// (messages received, stored, duplicate, rejected by status, pulled,
// returned; acks; held, dropped and pipelined pulls; append time; requests by
// command, qmq_realtime_requests_total) and series read at each scrape
// (collector.go: netserver.Stats and store.Stats): connections, requests
// in flight, subjects, consumer groups, consumers, the message and action
// logs' disk, the memory of the subjects' consume-log buffers (outside the
// Go heap, so not in the runtime's series:
// qmq_realtime_consume_log_buffer_bytes and _in_use), the store's syncs,
// failed appends, corrupt reads, skipped corrupt ranges and checkpoints,
// the message log's bytes zero-filled ahead of its end
// (qmq_realtime_message_log_zero_filled_bytes_total),
// and per consumer group (labels subject
// and consumer_group) its backlog, its un-acked messages and the part of
// its backlog the next retention pass would delete
// (qmq_realtime_backlog_at_risk_messages: alert on it). Broadcast
// subscribers are summed into one series, as they are keyed by consumer.
// Every series carries the broker group as the label group. A scrape walks
// every subject and group, so with tens of thousands of them scrape no
// more often than every few seconds.
//
// # Admin
//
// CmdConsumerManage resets a group's offset or takes a consumer offline or
// online; CmdBrokerStats reports subjects, groups, consumers and backlog;
// CmdDeadLetters lists and inspects a group's dead letters.
//
// # Lifecycle
//
// New opens (and recovers) the store; Start serves; Close stops taking
// messages, answers waiting pulls, finishes requests in flight, then closes
// the store, which flushes and writes a checkpoint (a master with an eligible
// slave hands the group to it first). Goroutines: the role loop (owned by
// failover.Member), the actor workers (pkg/actor), the store's and the
// servers' own; per master term livenessLoop, pressureLoop, seedDedupeLoop
// (owned by the term), syncWatchLoop and one goroutine per sync request
// being answered (owned by syncService); on a slave replicaLoop (owned by
// replica); a cut back runs on a goroutine of the Broker's.
package realtime

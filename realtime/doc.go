// Package realtime is the realtime broker: the master (or the slave) of one
// broker group. It stores messages in a realtime/store and serves them to
// consumer groups with no partitions: every consumer of a group pulls from
// the group's one cursor, and the store records each delivery in that
// consumer's pull log. The reasoning and the measurements behind the
// settings below are in NOTES.md.
//
// # Send
//
// A send request carries a batch of encoded messages; each is checked (CRC,
// limits, subject, the sender's publish permission: authz.go) and gets its
// own status. A message whose (subject, id, attempt) was stored within the
// dedupe window (Options.DedupeWindow, default 10 minutes, bounded by
// DedupeCapacity) is answered StatusDuplicate and not stored again. The rest
// go to the store in one append, and the reply leaves once they are durable
// (group commit under the default sync flush). Small requests are checked
// on the event loop; under --flush=async a lone send is written and answered
// on the loop (store.TryWriteViewsNow), otherwise requests are queued
// (store.AppendAsync with NoWait) or handed to a goroutine. Either way the
// store takes the views the handler parsed: each message is parsed and
// checked once (a queued request's copied body gets the views moved into
// it, protocol.View.Move). The dedupe table's two generations share one
// array on transparent huge pages, and a batch's slots are looked up in one
// pass so its cache misses overlap.
//
// # Pull
//
// Every pull goes to the actor of its (subject, consumer group) —
// broadcast subscribers have one actor each — on a shared pool of workers
// (pkg/actor, PullWorkers). An actor runs at most a time slice (default
// 5 ms) before it yields. A pull that finds nothing waits in its actor (long
// poll, at most MaxPullWait) until the store's OnAppend wakes it; one that
// sat in a mailbox past its wait plus PullGrace is answered
// StatusRetryLater; a full mailbox answers StatusBusy. Retry subjects hand
// out nothing before it is due. A consumer may keep several pulls in flight
// (consumer.PullDepth): pipelined pulls (protocol.PullPipelined) get new
// messages only, and one connection's pulls are answered in order.
//
// Inline pulls (Options.InlinePulls, default on): a pull whose actor is idle
// runs on the event loop and its answer leaves with the read's own write. A
// pull that must wait is detached; a group whose inline run touched the
// block device or took over 20 ms goes to the workers for a second, so the
// loop never waits on the disk.
//
// # Fair share
//
// Options.FairShare shares deliveries between groups while the broker is
// busy (fairshare.go). Each actor (a flow) tallies, over Window (100 ms),
// its deliveries, pulls and their waits. A flow contends while its pulls are
// hungry (asked for a full batch and got it). When two or more flows contend
// and the broker is busy (the others' pulls waited over Busy, 50 µs; the Go
// scheduler's latency over Busy; or, on Linux, the broker's threads in the
// run queue over RunQueue, 0.4 s/s), a flow that delivered over Excess (1.1)
// times the mean of the flows not held has each new pull held, rechecked
// every Hold/50 and served once back within its share or after Hold (50 ms).
// The busy gate lingers ten Windows. A held pull is charged HoldCharge (64)
// messages. Invariants: of two flows only the heavier can be held; a flow
// within its share is never held; a consumer's pulls take entries in the
// order sent (pullCall.after). Hold 0 turns it off. Counted in
// qmq_realtime_pulls_held_total.
//
// # Ack
//
// Acks are inclusive ranges of a consumer's pull sequences, or lists of
// them, each named one by one (protocol.AckList: per-message acks that were
// ready together, applied in the order listed); an empty range is a
// heartbeat. Acks above a gap mean acks were lost: the gap's messages
// go to the group's retry subject, due after RetryDelay (a gap over 4,096
// entries goes back to the group). The release flag hands a closing
// consumer's un-acked messages back at once; a consumer silent for the
// consumer timeout (default 30 s) loses them the same way (livenessLoop).
// Acks that store.TryAck applies without waiting are answered on the loop.
// A consumer's acks are applied in the order they arrived (ackorder.go):
// once one is detached (the group's lock busy, a gap, a release), its later
// acks queue behind it on one goroutine until the queue runs dry, so a
// consumer may pipeline single-message acks without any looking lost.
//
// # Replication
//
// A broker is its group's master or its slave (Options.Role is the role it
// starts in). With meta servers and no fixed Master the group's role loop
// (pkg/failover: election, eligible set, write gate, takeover, switchover;
// its doc.go has the safety argument) changes the role in place (term.go):
// a promotion promotes the copy's store where it is (store.Promote), a
// demotion reopens the store as a copy.
//
// A slave refuses client commands with StatusNotMaster (naming its master)
// and runs replicaLoop: each CmdSyncLog carries its group and broker id,
// segment sizes, the ends it has received of both logs, its durable
// message-log end (its acknowledgement) and its lease stamp. The master
// (syncService, sync.go) answers with up to SyncMaxBytes of each log past
// those offsets, long-polling up to SyncWait (CmdSyncLog is served on the
// event loop: an acknowledgement completes the replies it covers there, a
// fetch is detached to its goroutine). The slave keeps two fetches in
// flight, the second pipelined (CmdSyncLogAhead, syncstream.go) to wait
// at the master for the next write, and writes each answer as it arrives;
// two copySyncLoops fdatasync what was written and acknowledge with a
// one-way request, and copyIndexLoop indexes after them. The message index
// is copied, not built: indexCopyLoop fetches the master's run files
// (CmdSyncIndexRun, replicaindex.go).
//
// Tentative tail: the master serves message-log records as soon as they are
// written, so its fdatasync and the slave's overlap; the response's End is
// the master's committed end, and the slave indexes records only below it.
// A failed write or fdatasync cuts the master's log back to its committed
// end, recorded with a generation (store.MessageCuts) before truncating; the
// slave cuts its tail in place (store.Replica.CutTail). Invariant: a copy's
// consume logs and checkpoints hold durable master records only.
//
// Waiting for the slave (--wait-slave): while the role loop counts on a
// slave, a send's reply waits until the slave's durable end passes it
// (MaxWaitingAcks bounds the waiting replies; past it StatusBusy). A resend
// of a message whose first reply still waits is answered StatusBusy, not
// StatusDuplicate. When the slave is gone (connection closed, silent for
// SuspectAfter, or lagging SlaveLagReadonly) the role loop drops it from the
// eligible set and the master serves alone, or, under --slave-down=readonly,
// fails waiting replies and new sends with StatusReadonly.
//
// Epochs and rejoin: the epoch history (file "epochs") lists the epochs that
// wrote the logs with their start offsets. A rejoining copy sends its history
// (CmdSyncEpoch); the master answers with the point of divergence and the
// copy cuts back past it (store.Truncate) and converges byte for byte. A
// send with a newer epoch than the master's is refused StatusStaleEpoch.
//
// Known limits: consumers that never got an entry are not replicated; a
// slave behind the master's first kept action-log offset (ErrReplicaGap)
// needs a fresh copy; the dedupe table is refilled from the log's newest
// messages on each master term (seedDedupeLoop).
//
// # Metrics and admin
//
// /metrics on the HTTP port: counters and histograms of sends, stores,
// duplicates, rejections by status, pulls (held, dropped, pipelined,
// inline), acks, append time and (--wait-slave) the wait for the slave;
// series read at each scrape (collector.go):
// connections, subjects, groups, consumers, disk, consume-log buffers, syncs
// and corrupt reads, and per consumer group its backlog, un-acked messages
// and qmq_realtime_backlog_at_risk_messages (alert on it), qmq_realtime_dead_letters
// per group (deadcount.go, masters only); replication and
// qmq_failover_* series. A scrape walks every subject and group.
// CmdConsumerManage resets offsets and takes consumers offline or online,
// CmdBrokerStats reports (with each subject's in-rate and each group's
// out-rate over the last heartbeat interval, subjectrates.go), CmdDeadLetters lists, re-drives and purges,
// CmdFindMessages finds stored messages by id or key (lookup.go) with where
// each stands in its consumer groups (store.Deliveries): admin identities
// only. Options.TracerProvider (off by default; qmq-realtime takes it from
// OTEL_*) records a store span per stored message that carries a trace
// context (tracing.go).
//
// # Lifecycle
//
// New opens (and recovers) the store; Start serves; Close stops taking
// messages, answers waiting pulls, finishes requests in flight, hands the
// group to an eligible slave, then closes the store (flush and checkpoint).
// Goroutines: the role loop (owned by failover.Member), the actor workers,
// the store's and the servers' own; per master term livenessLoop,
// pressureLoop and seedDedupeLoop (owned by the term), syncWatchLoop and one
// goroutine per sync request (owned by syncService); on a slave replicaLoop
// and, per connection to the master, copySyncLoop and copyIndexLoop (owned
// by follow).
package realtime

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
// re-forward does not make a copy. The rest go to the store in one append;
// the reply goes out from the store's commit callback once they are durable
// (group commit under the default sync flush). Requests up to 64 KiB are
// checked on the event loop itself (never blocking). Under --flush=async,
// when nothing else is appending, the store appends them at once
// (store.TryAppendNow) and the reply leaves with the loop's write at the end
// of the read: a lone send crosses no goroutine, as nsqd's PUB does not.
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
// # Ack
//
// Acks are inclusive ranges of a consumer's pull sequences; an empty range
// is a heartbeat. Acks above a gap mean acks were lost: the gap's messages
// are stored again on the group's retry subject, due after RetryDelay. The
// release flag (a consumer closing) hands the consumer's un-acked messages
// back to the group at once. A consumer that neither pulls nor acks for the
// consumer timeout (default 30 s) loses them the same way (livenessLoop).
//
// # Replication (phase 1: master and slave)
//
// Options.Role makes a broker its group's master (the default) or its slave.
// A slave opens its store as a replica (see realtime/store, "Replication"),
// refuses sends, pulls, acks, consumer management and dead-letter commands
// with StatusNotMaster, registers with the meta server as protocol.RoleSlave
// (state readonly), and runs replicaLoop, which syncs from Options.Master
// (or, without it, the group's master as the meta servers' register
// responses name it, so a slave already follows a new master). Each
// CmdSyncLog request carries the slave's group, its segment sizes, the ends
// of what it has received of both logs (where to read from) and its durable
// message-log end (its acknowledgement). The master (syncService, sync.go)
// answers with up to SyncMaxBytes of each log's committed records past those
// offsets (pkg/protocol sync.go), long-polling on the store's CommitSignal
// up to SyncWait when it has nothing new. The slave keeps one fetch in
// flight while it writes the chunk before at the same offsets, fdatasyncs
// and replays it, then acknowledges it at once with a one-way request
// (MaxBytes 0), so an acknowledgement never waits for a long poll. Bad requests
// get clear errors: undecodable, past the committed end or not at a record
// start → StatusBadRequest; another group or different segment sizes →
// StatusInvalid; a sync to a slave → StatusNotMaster. Failures back off
// 50 ms → 1 s.
//
// --wait-slave (Options.WaitSlave): a send's reply waits until the slave's
// durable message-log end passes the last stored message's offset. Waiting
// replies are kept ordered by offset and completed as acknowledgements
// arrive (await runs on the store's commit goroutine and only takes a
// mutex, so appends never wait for the slave). Admission bounds them: with MaxWaitingAcks replies waiting, new
// sends get StatusBusy (the bound is checked at admission, so the requests
// already inside the store may pass it by their number). syncWatchLoop
// dates the bytes the slave lacks (samples of the committed end every 10 ms):
// once the oldest is older than SlaveLagReadonly, the group turns readonly —
// waiting replies and new sends get StatusReadonly (their messages are on
// the master's disk only; a producer's retry elsewhere may make a
// duplicate, as at-least-once allows) and the meta server hears
// GroupReadonly so producers go to other groups — until the slave holds the
// master's committed end again. Without --wait-slave the master never waits
// for or goes readonly because of its slave. Replication status:
// Broker.Replication (role, epoch, slave offset, lag in bytes and seconds,
// waiting acks) and the metrics qmq_realtime_slave_offset_bytes,
// _slave_lag_bytes, _slave_lag_seconds, _waiting_acks, _slave_lag_readonly,
// _sync_bytes_served_total on a master and qmq_realtime_replication_lag_bytes,
// _replication_lag_seconds, _replication_errors_total on a slave.
//
// Measured (scripts/bench.sh replication: the produce suite's worker with
// its defaults, 16 requests of 256 messages in flight, three alternating
// rounds; master, slave and producer share the 2-core machine and its
// disk with other work): produce_wait_slave_ratio 0.83, 0.74 and 0.75 in
// the last three runs (0.59–0.82 before the master stopped re-checking
// every served CRC; per-round ratios 0.56–0.94, as the load swings "alone"
// by ±30% within a run). Profiles: the producer worker (one core) and the
// master take most of the two cores; the slave takes a quarter of one
// (CRC, fdatasync, indexing), so on this machine the ratio is bound by
// CPU as much as by the second fdatasync a reply waits for.
//
// # Replication, phase 2 (automatic failover; planned, not built)
//
//   - Election: every broker of a group campaigns in an etcd election
//     (concurrency.Election on /qmq/groups/<group>/leader) with a lease of
//     a few seconds; the winner is the master. The epoch is the election's
//     revision (monotonic per group, u64), stored with the leader key.
//     Sync requests and responses already carry an epoch (0 now): a master
//     refuses syncs from an older epoch (StatusStaleEpoch), a slave refuses
//     answers from an older master, and sends carry the epoch the client
//     learnt from the meta server (protocol send request has the field).
//   - Fencing: a master renews its lease and stops accepting writes (sends,
//     pulls, acks) as soon as it has not renewed for lease TTL minus a
//     margin (clock-independent: measured with the monotonic clock from the
//     last successful KeepAlive), so it is readonly before its lease can
//     expire and before any slave can win. With --wait-slave only what the
//     slave durably holds was acknowledged, so nothing acked is lost;
//     without it a failover loses what the slave had not copied (its lag
//     in bytes, shown in the metrics).
//   - Promotion: the slave that wins stops replicaLoop, finishes applying
//     what it has, and switches its store from replica to master mode
//     (store.Promote, built and tested in phase 1: the logs are already
//     byte-identical up to the slave's durable ends and continue there), then
//     starts syncService and livenessLoop and registers as RoleMaster with
//     the new epoch; the meta server routes to it within a heartbeat.
//     Consumers continue from their acked positions because pull logs,
//     cursors and acks are rebuilt from the replicated action log (at most
//     the last ActionFlushInterval + one sync of pulls and acks is lost:
//     re-delivery, never loss).
//   - Rejoin: the old master, on losing its lease, closes its servers,
//     reopens its store as a replica and syncs from the new master. Its
//     logs may hold committed records the new master never got (not acked
//     under --wait-slave). The sync request's offsets then lie past the new
//     master's ends (StatusBadRequest today): phase 2 adds a truncation
//     point to the response (the new master's end at its promotion, per
//     epoch, kept in an epoch history file) and a store.TruncateTo that cuts
//     both logs back to it, rebuilds consume logs and groups from the last
//     checkpoint at or below it (or from empty), and continues.
//   - Snapshot: a slave whose action log is behind the master's first kept
//     action-log offset (ErrReplicaGap) fetches the master's checkpoint and
//     the pull-log entries above each consumer's acked position
//     (CmdSyncCheckpoint), installs them, and syncs from the checkpoint's
//     action offset.
//   - State outside the logs: the dead-letter re-drive/purge record
//     (deadletters.json) and consumers that never got an entry are not in
//     the action log, so a new master does not have them; the first should
//     become actions (or be replicated as a file) before failover ships.
//   - Admin: qmqctl and the console show role, epoch and lag per broker
//     (Broker.Replication; CmdBrokerStats can carry it) and a planned
//     switchover makes the master stop writes, wait until its slave holds
//     its committed ends, and resign the election.
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
// the store, which flushes and writes a checkpoint. Goroutines: livenessLoop
// (owned by the Broker), the actor workers (pkg/actor), the store's and the
// servers' own; on a master syncWatchLoop and one goroutine per sync request
// being answered (owned by syncService), on a slave replicaLoop (owned by
// replica).
package realtime

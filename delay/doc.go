// Package delay is the delay server: the master or the slave of one delay
// group. A master keeps delayed and scheduled messages in a delay/store (a
// durable message log, hourly schedule files, a 500 ms time wheel loaded 30
// minutes ahead) and forwards each one to a realtime broker group of its
// subject when it falls due — never before. A slave keeps a copy of its
// master's store and takes the group over when the master is gone.
//
// # Receive
//
// Producers send messages due 500 ms or more ahead here (the producer
// library routes by DeliverAt). A send request's messages are appended to
// the store and acknowledged once durable (group commit under the default
// sync flush), each with its own status: a message beyond the horizon
// (default 2 years) is refused with StatusBeyondHorizon, an oversized one
// with StatusTooLarge — never reported stored when it was not. A slave, and
// a master whose write gate is closed (see Failover), refuse sends with
// StatusNotMaster (StatusReadonly while its group is readonly), which
// producers retry on another group after refreshing their routes.
//
// Scheduled messages can be cancelled (CmdScheduleCancel, by subject and
// schedule key or message id; delay/store doc "Schedule keys and Cancel"
// has the rule that decides a cancel racing the firing): each target is
// answered cancelled, already fired or not found once the cancel is
// durable, with --wait-slave once the slave holds it too, so a failover
// never forwards a message answered cancelled. Keys are unique per delay
// group among its pending messages. CmdScheduleReschedule moves a message
// to a new due time in one store record (never both times, never
// neither). A message past its expiry (qmq.expire.at) when it falls due is
// dropped, not forwarded (qmq_delay_messages_expired_total). Recurring
// schedules are keyed template messages (recurring.go). The operations
// HTTP port serves the timeline (schedulehttp.go; qmqctl schedule).
// CmdFindMessages (admin read; lookup.go) finds a subject's scheduled
// messages by id or schedule key, pending, cancelled or fired, for the
// meta server's lookup and trace.
//
// # Forward
//
// forwardLoop takes due messages from the store in batches and sends each,
// as the exact bytes the producer encoded (same id), through a producer
// (pkg producer: batching, a breaker per broker, latency-aware group choice,
// retries with back-off on another group) to a writable realtime group of
// its subject; SendChecked takes the bytes with their subject and id, as
// the store checked them on the way in and on read-back (one parse here,
// none in the producer); while two of its requests are unanswered, a batch
// that is not full waits up to 1 ms to fill (producer.WithBusyLinger), so a
// burst due in the same millisecond goes out as full requests. When the
// realtime broker has stored it (or answers that it already had it: its
// dedupe window drops re-forwards), markLoop records it in the hour's
// dispatch log. A message not yet recorded when the server
// stops or dies is forwarded again after the restart; the realtime broker
// drops that copy. A master whose gate is closed takes nothing from the
// store (the wheel keeps the messages; forwards already handed to the
// producer finish).
//
// # Replication
//
// What a slave copies. The store's durable state is its hour files: the
// schedule file of an hour holds full copies of the messages due in it,
// written by replaying the message log deterministically (same records,
// same order, same offsets — also after a master's crash and recovery), and
// the dispatch file says which of them were forwarded. Both only grow;
// retention removes whole hours. So a slave copies each file's new bytes
// at the same offsets (delay/store Replica) and has the same hours, with
// the dispatch entries pointing at the same schedule offsets; it needs no
// message log of its own (the master's is trimmed as soon as its records
// are in the hour files, so it could not serve a slave that starts from
// empty anyway), and catching up from empty is copying every hour file.
// Copying the hour files rather than replaying the message log on the
// slave is the "derived, not copied" rule bent: the hour files are the
// derived state here, and copying them byte for byte is what keeps the
// dispatch entries meaningful.
//
// The conversation (pkg/protocol delaysync.go). replicaLoop asks the master
// (Options.Master, or the group's master as the meta servers name it) with
// CmdDelaySyncManifest for the hours changed since the version its copy
// holds — the first request of a connection asks for every hour. The
// master's store numbers its changes (replayed schedule bytes, dispatch
// entries, removed hours) per run; a request that names another run (the
// master restarted) gets every hour again. The master long-polls a request
// with nothing new up to SyncWait, and answers with RetryLater until its
// replay has caught up with its log after a restart (its schedule files are
// cut back to its checkpoint and rebuilt meanwhile). The slave then reads
// the missing bytes of each file with CmdDelaySyncRead (whole records, at
// most SyncMaxBytes an answer), checks every record's CRC, writes them,
// removes the hours the master no longer has, fdatasyncs (Replica.Commit)
// and only then asks for the next version: that request carries its
// acknowledgement, the master's replayed message-log position the copy now
// durably holds. Every store has an ID from its creation (a promoted copy
// gets a new one and records its origin: the store it copied and the hour
// sizes the two share). A copy of another store — or a master's own
// directory opened as a slave, a deposed master rejoining — is checked
// against the master's origin (CmdDelaySyncOrigin): when the master's store
// was promoted from it, each hour file is cut back to the shared size and
// hours the master never had are removed (Replica.Rejoin); otherwise it is
// dropped and copied again from empty (Replica.Follow). A slave whose copy
// no longer lines up with the master's files (a read finds no record where
// the copy ends) drops it and copies again.
//
// --wait-slave (Options.WaitSlave): while the role loop counts on a slave
// (pkg/failover: the eligible slave, or one joining) a send's reply waits
// until the slave has acknowledged a replayed position at or past the
// message log's end as it was when the messages were stored. Waiting
// replies are kept ordered and completed as acknowledgements arrive; with
// MaxWaitingAcks waiting, new sends get StatusBusy. When the eligible slave
// is gone the role loop removes it from the eligible set and the replies
// complete (serving alone), or while it cannot (or under
// --slave-down=readonly) fails them and new sends with StatusReadonly (their
// messages are on the master only; a retry elsewhere may make a duplicate,
// dropped by id downstream). A master without meta servers turns readonly
// by itself when its slave lags past SlaveLagReadonly. Without --wait-slave
// a master never waits for its slave. Measurements: NOTES.md.
//
// Lag: Server.Replication, the heartbeats (BrokerLoad.ReplicaLagBytes and
// ReplicaLagMillis, shown by qmqctl and the console) and the metrics
// qmq_delay_replication_lag_bytes and _seconds (a master: message-log bytes
// its slave lacks, the age of the oldest; a slave: bytes of the manifest
// being copied, the time since its copy last held everything), plus
// qmq_delay_waiting_acks, _slave_lag_readonly, _sync_bytes_served, _role,
// _epoch and _fenced, and the role loop's qmq_failover_*.
//
// # Failover
//
// With meta servers the group's role loop (pkg/failover: election, eligible
// set, write gate, takeover, switchover; its doc.go has the safety argument
// case by case) changes the role; Options.Failover off (or a fixed Master)
// keeps the configured one. The server is its failover.Server (role.go):
//
//   - Promotion: copying stops (StopCopy), the copy becomes a master's store
//     (Replica.Promote: a checkpoint of the copy, a new store ID; the message
//     log starts past every copied record), and it opens as a master:
//     recovery rebuilds the wheel from the schedule files minus the dispatch
//     files, so every pending message is forwarded when due and none before
//     (the wheel compares due times with the clock when it fires). Messages
//     due while no master was alive are forwarded at once by the new master.
//   - Demotion: the master closes (replies waiting for its slave fail, never
//     acknowledged; forwards in flight finish) and reopens the directory as a
//     slave's copy. The new master's store was promoted from this one's
//     copy, so the first sync keeps of each hour file what the new master's
//     copy had when promoted and drops the rest — messages and dispatch
//     entries the new master never had, and its message log — then copies
//     the new master's newer bytes (a directory the new master's store did
//     not come from is dropped and copied from empty).
//   - The write gate: sends are taken and due messages forwarded only while
//     it is open; requests carry epochs (a master refuses sync requests from
//     a slave that knows a newer epoch, StatusStaleEpoch; a slave refuses
//     answers from a master at an older epoch).
//
// What a failover costs. With --wait-slave every acknowledged message is on
// the eligible slave, so none is lost; without it a failover loses what the
// slave had not copied. Messages the old master forwarded but whose
// dispatch entries the slave had not copied yet are forwarded again by the
// new master: duplicates we accept because the realtime broker drops them by
// message id within its dedupe window (default 10 minutes; the delay server
// keeps each message's id and bytes). Never early: neither master hands out
// a message before its due time.
//
// Known limits: clocks of master and slave must agree (the promoted slave
// fires by its own clock; skew makes forwards early or late by the skew);
// under --flush=async a master's machine crash can lose bytes its slave
// copied: the slave then drops its copy and copies again, and lost dispatch
// entries mean re-forwards (dropped by id); a full manifest lists every
// hour, about 33 bytes each (17,500 hours for the default two-year horizon).
//
// # Lifecycle
//
// New opens (and recovers) the store or the copy; Start serves, forwards
// or copies, and starts the role loop; Close hands the group to an eligible
// slave (a master) and unregisters, stops taking messages, lets forwards in
// flight finish, records them and closes the store. Goroutines: the role
// loop (owned by failover.Member, the only one that changes the role),
// forwardLoop, markLoop, recurLoop and the source's watchLoop and answers
// (owned by the master), replicaLoop (owned by the slave), the store's,
// the producer's and the servers' own.
package delay

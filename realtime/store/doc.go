// Package store is the realtime broker's storage, with no networking: one
// message log for every subject, a consume log per subject, a pull log per
// (subject, group, consumer), an action log of pulls, acks and consumer
// events, and checkpoints. DESIGN §4 and reference/qmq.md §3–§4 describe the
// model; this package tightens it where QMQ is weak: every record is
// validated on recovery and on read, appends are durable by default, and
// retention is also by size. The longer reasoning and the measurements
// behind the choices below are in NOTES.md ("Design details").
//
// # API
//
// Store's exported methods (20), by concern:
//
//	s, err := store.Open(dir, opts, lg)          // recover and start; s.Close()
//	s.Append(ctx, msgs) ([]store.Result, error)  // encoded messages, checked here, waiting
//	s.AppendAsync(views, results, done, opts...) // the asynchronous append: parsed, checked views
//	s.TryWriteViewsNow(views, results) (store.Written, bool) // the try-now append; Written.Publish
//	s.Pull(store.PullRequest{...}) (store.PullResult, error)
//	s.Ack(req) (store.AckResult, error); s.TryAck(req)  // AckResult.Gap: lost acks to retry
//	s.ReturnUnacked / RemoveConsumer / ResetGroup       // consumers and offsets
//	s.Read(subject, from, max); s.Watch(subject)        // tools; OnAppend for a subject
//	s.Stats() (Stats.Open: what recovery did); s.CommittedEnds(); s.SegmentSizes()
//	s.Checkpoint(); s.FlushActions()                    // maintenance the loops also do
//	s.Lookup().ByID / ByKey / Deliveries                // message index (msgindex.go), per-group state (delivery.go)
//	s.Source().ReadMessageTailInto / ReadActionLogInto / CommitSignal  // a master's side
//	s.Replica().ReplicateMessages / ReplicateActions / Ends / Active / Promote // a slave's side
//	store.Truncate(...), store.Views(msgs, limits)      // failover; parse and check for AppendAsync
//
// Messages are pkg/protocol messages, parsed and checked once per hop:
// Append and Views check each (CRC, Limits); AppendAsync and
// TryWriteViewsNow take checked views (a new subject is checked against
// Options.Limits). Bytes are kept exactly; a rejected message gets a
// *protocol.Error in its Result and the rest go on. Ids are deduplicated
// by the broker, not here. Pulled messages are copies the caller owns
// (Release).
//
// # Files
//
//	dir/LOCK                                   flock: one store per directory
//	dir/checkpoint                             checkpoint.go
//	dir/messagelog/%020d.seg                   message log, 1 GiB segments (fallocate'd)
//	dir/actionlog/%020d.seg                    action log, 64 MiB segments
//	dir/consumelog/n-<subject>/%020d.seg       40-byte entries, 2^18 per file
//	dir/pulllog/n-<subject>/n-<group>/n-<consumer>/%020d.seg   8-byte entries, 2^18 per file
//	dir/index/%020d.run                         message index by id and key (msgindex.go)
//
// Segment files are named by their base (pkg/segment); names over 200
// bytes are hashed (h-<sha256/16>). Each byte layout is drawn in the file
// that writes it: pkg/segment, messagelog.go, consumelog.go, pulllog.go,
// actionlog.go, checkpoint.go. Consume-log and pull-log files share one
// segment.FilePool (LRU, MaxOpenFiles 1024); un-acked entries live in
// pull-log files (TestScale).
//
// # Write path and flush policy
//
// appendLoop takes every queued batch (up to MaxBatchBytes), assigns each
// subject's sequences (0-based: the consume-log sequence) and writes the
// records with one write per segment. Under FlushSync (the default) a
// syncLoop (groupcommit.go) fdatasyncs, through a segment.Syncer of its
// own, whenever groups were written that no running sync covers; a second
// one starts another sync beside it once it has run 1 ms (a slow sync
// does not hold back the groups written after it). Each group is
// published, in order, once a sync begun after it was written has ended:
// consume-log entries become visible, callbacks run, OnAppend fires.
// After a failed sync nothing in flight is published. Under FlushAsync the
// appender publishes after the write and flushLoop fdatasyncs every
// FlushInterval; a caller with nothing
// queued may append on its own goroutine (TryWriteViewsNow, then
// Written.Publish, so a server can reply in between). Readers see only
// published entries, so under FlushSync no consumer receives a message a
// crash could take back. Consume-log entries are buffered per subject and
// written in bulk: derived data, made durable by checkpoints and rebuilt
// from the message log after a crash.
//
// A failed write or sync (a full disk) fails every group in flight with an
// error wrapping ErrIO and the cause (errors.Is(err, syscall.ENOSPC)); their
// sequences are given back, the log is cut back to the last published group
// and appends resume when space returns. Nothing published is touched.
//
// Under FlushSync zeroFillLoop keeps ZeroFillAhead (16 MiB) past the log's
// end written with zeros (a sync then overwrites written blocks); under
// FlushAsync the log is written through a shared mapping (NOTES.md).
//
// Page cache: with PageCacheWindow set (the library leaves the cache to
// the kernel; the broker sets 1 GiB), pageCacheLoop drops the message
// log's durable bytes more than the window behind its synced end from the
// page cache every 100 ms (segment.Log.DropCache), so a store writing
// hundreds of MB a second reuses the same memory instead of growing the
// cache into fresh pages, which cost it several times the CPU (pkg/segment
// doc.go). Pulls and replicas further back than the window read the disk.
// A replica keeps ReplicaPageCacheWindow (the broker: 64 MiB) until
// Promote: no consumer reads it before. The cost on our VM (NOTES.md):
// freeing GBs of cache slowed the fsyncs of what ran next.
//
// # Consumer groups and acks
//
// A group has one cursor over the consume log, shared by its consumers; a
// new group starts at the latest entry unless the pull asks for Earliest. A
// pull first re-delivers the consumer's un-acked entries above
// max(KnownPullSeq, acked) (unless Pipelined), then takes the group's
// returned queue, then the cursor, skipping entries its tag filter rejects
// (a 64-bit bloom, then the tags: no false positives), gives them the
// consumer's next pull sequences (contiguous from 0), writes them to its
// pull log and appends a PULL action. Acks are inclusive ranges of pull
// sequences; an ack above acked+1 is a lost ack: the entries between are
// returned in AckResult.Gap (the broker retries them) and acked, or, past
// maxGapRetry (4,096), go back to the group as a dead consumer's do.
// ReturnUnacked puts a consumer's un-acked entries in the group's returned
// queue (runs of sequences, persisted); HoldUntilDue stops a pull at the
// first entry not due yet (retry subjects) and reports NextDue; broadcast
// consumers are groups of their own without a pull log; ResetGroup moves
// the cursor to the earliest, the latest, or the first entry at or after a
// time (append times never decrease within a subject).
//
// # Action log, checkpoints and recovery
//
// Every change to a group is an action, applied under the group's lock and
// written and fsynced every ActionFlushInterval (50 ms) and before every
// checkpoint; each carries the group's version, so a replayed action the
// checkpoint holds is a no-op. A crash can forget the last 50 ms of pulls
// (delivered again) and acks (re-delivered); a consumer holding pull
// sequences the store lost gets them voided (VOID) before they can ack
// other messages. A checkpoint records the message-log offset the consume
// logs cover, each subject's sequences, the action-log offset and every
// group; the logs are synced first and the file is replaced atomically
// (temp, fsync, rename, fsync dir). Recovery: load the checkpoint (a
// damaged one means a full replay); replay the message log from its offset,
// checking every record (magic, length, CRC-32C) and indexing it; cut a
// torn tail; corruption in the middle fails Open naming the range, or with
// SkipCorrupt is skipped, counted and turned into holes; cut consume logs
// to what was replayed; replay the action log the same way; pull back
// cursors past a subject's end (FlushAsync only). crash_test.go kills an
// appending child with SIGKILL and checks every acknowledged message.
//
// Reads check every consume-log entry's CRC and each record's header; a
// failed check is counted (Stats.CorruptReads) and never served.
//
// # Retention
//
// A retention pass (every RetentionInterval) deletes whole message-log
// segments, oldest first and never the active one, while every record of
// one is older than RetentionAge or the log is larger than RetentionBytes,
// then the consume-log segments below the subjects' new minimums. Stats
// shows what the next pass would drop (RetentionBoundary, RetentionDropSeq,
// GroupStats.AtRisk); a pull whose cursor fell below the minimum skips
// forward (PullResult.Expired).
//
// # Replication
//
// A slave's store (Options.Replica) refuses client changes (ErrReplica)
// and is fed the master's two logs byte for byte: Source gives LogChunks
// (whole records as stored, up to the committed end, plus a tentative tail
// so the slave's fdatasync overlaps the master's); Replica checks every
// record's CRC, writes it at the master's offsets, syncs and indexes it
// with recovery's code (the tentative tail only once a later chunk passes
// it); its message index takes the master's run files as they are
// (Options.CopyMessageIndex, indexcopy.go) or, without that, the entries
// it parsed; actions apply as live ones do. A replica whose master no longer
// keeps its offset restarts at the master's Start; action logs cannot
// skip (ErrReplicaGap). Truncate cuts a closed store back to a new master's
// promotion point after a failover (or wipes it to be copied again);
// Replica.Promote turns a replica into a master's store where its copy ends.
//
// # Locks
//
// Outermost first: closeMu (RW) > replMu > ckptMu > retMu > groupsMu (RW)
// > group.mu > subjectsMu (RW) > subject.mu (RW) > actionLog.flushMu >
// actionLog.mu > commit.mu, and pkg/segment's leaf locks. The appender owns
// subject.next and never takes a group lock, so appends never wait for
// pulls; pulls read the message log with pread outside every store lock.
package store

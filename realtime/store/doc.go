// Package store is the realtime broker's storage, with no networking: one
// message log for every subject, a consume log per subject, a pull log per
// (subject, group, consumer), an action log of pulls, acks and consumer
// events, and checkpoints. The broker (package realtime) calls it; DESIGN §4
// and reference/qmq.md §3–§4 describe the model, which this package follows
// and tightens where QMQ is weak (every record is validated on recovery and
// on read, appends are durable by default, retention is also by size).
//
// # API
//
//	s, err := store.Open(dir, opts, lg)         // recover and start
//	s.AppendAsync(msgs, func([]store.Result))   // the broker replies from the callback
//	s.Append(ctx, msgs) ([]store.Result, error) // the same, waiting
//	s.Pull(store.PullRequest{...}) (store.PullResult, error)
//	s.Ack(store.AckRequest{...}) (store.AckResult, error)   // AckResult.Gap: lost acks to retry
//	s.ReturnUnacked(subject, group, consumer)   // a dead consumer's entries back to its group
//	s.RemoveConsumer(subject, group, consumer)  // the same, then forget it
//	s.ResetGroup(subject, group, kind, t)       // earliest, latest or a time
//	s.Read(subject, from, max)                  // tools: read a subject (dead letters)
//	s.Stats(); s.Checkpoint(); s.RunRetention(); s.Close()
//	s.ReadMessageLog/ReadActionLog(+Into), s.ReplicateMessages/ReplicateActions,
//	s.CommittedEnds, s.CommitSignal, s.Promote   // replication, see below
//	s.FlushActions; store.Truncate(dir, opts, message, action, lg) // failover
//	s.FindByID(id), s.FindByKey(key) ([]store.Found, error) // msgindex.go
//
// Messages are encoded pkg/protocol messages; Append validates each with
// protocol.ParseMessage (CRC) and Limits.CheckView and stores exactly those
// bytes. A rejected message gets a *protocol.Error (StatusInvalid,
// StatusTooLarge) in its Result and the rest of the batch goes on. System
// subjects (%RETRY%s%g, %DEAD%s%g) are ordinary subjects here. Message ids
// are not deduplicated (the broker keeps that window).
//
// Options.OnAppend(subject, next) is called after new entries of a watched
// subject (Store.Watch) became readable (durable under FlushSync): the
// broker watches the subjects it has pull actors for and wakes their long
// polls from it. It runs on the commit goroutine and must not block. A
// commit checks each touched subject's flag (in the line it has just
// written) and calls nothing for the thousands of subjects nobody pulls.
//
// Pulled.Message and AckResult.Gap messages are copies in a buffer allocated
// for the call (one buffer per pull): the caller owns them, no mmap aliasing.
//
// # Files
//
//	dir/LOCK                                   flock: one store per directory
//	dir/checkpoint                             see checkpoint.go
//	dir/messagelog/%020d.seg                   message log, 1 GiB segments (fallocate'd)
//	dir/actionlog/%020d.seg                    action log, 64 MiB segments
//	dir/consumelog/n-<subject>/%020d.seg       40-byte entries, 2^18 per file
//	dir/pulllog/n-<subject>/n-<group>/n-<consumer>/%020d.seg   8-byte entries, 2^18 per file
//	dir/index/%020d.run                         message index by id and key (msgindex.go)
//
// Segment files are named by their base (byte offset or entry sequence),
// see pkg/segment. Names longer than 200 bytes are hashed (h-<sha256/16>).
// Byte layouts are drawn next to the code that writes them: segment records
// in pkg/segment, message records in record.go, consume-log entries in
// entry.go, pull-log entries in group.go, actions in actionlog.go, the
// checkpoint in checkpoint.go.
//
// # Write path and flush policy
//
// AppendAsync validates on the caller's goroutine and queues the batch. One
// goroutine, appendLoop, takes every batch that has arrived (up to
// MaxBatchBytes), assigns per-subject sequences (0-based, the consume-log
// sequence), encodes the records and writes them with one write per segment.
// Under FlushSync (the default) it hands the group to syncLoop and goes on
// with the next group while syncLoop runs one fdatasync for every group
// written meanwhile, then publishes them in order: the consume-log entries
// become visible, callbacks run, OnAppend fires. Under FlushAsync the
// appender publishes right after the write and flushLoop fdatasyncs every
// FlushInterval. Under FlushAsync a caller with no append queued may also
// append on its own goroutine (TryAppendNow, TryAppendViewsNow), or in two
// steps: TryWriteViewsNow writes the records and returns holding the
// writer, PublishWritten indexes and publishes them, so a server can send
// its reply in between (a written record is as safe from a process crash as
// a published one: recovery indexes the log's tail again). Consume-log entries are buffered per subject (16 KiB) and
// written to their file in bulk; they are derived data, made durable only by
// checkpoints and rebuilt from the message log after a crash.
//
// Readers (Pull, Read) only see published entries, so under FlushSync a
// consumer never receives a message that a crash could take back.
//
// A failed write or sync (a full disk) fails every group in flight with an
// error wrapping ErrIO and the cause (errors.Is(err, syscall.ENOSPC)); the
// failed messages are not stored and their sequences are given back. Before
// the next group the appender cuts the message log back to the end of the
// last published group (segment.Log.Reset, which also lifts the poison) and
// appends resume as soon as space returns. Nothing published is touched.
//
// # Writing through a mapping
//
// Under FlushAsync the message log is written through a shared mapping of
// its last segment (pkg/segment, doc.go): a lone record costs a memcpy
// instead of a pwrite, a fifth of a one-in-flight send's round trip.
// Under FlushSync, and always for the action log, the logs use pwrite: a
// write through the mapping that touches a fresh page takes a page fault,
// and ext4 makes that fault wait for the journal commit an fdatasync is
// running (the segments' fallocated extents turn from unwritten to
// written), so every fsync stalled the appender behind it. Measured on the
// latency suite (durable flush, 20,000 msg/s): p50 0.44 ms with pwrite,
// 1.18 ms with the mapping. The first touch of each page of the mapping
// still faults; the faults that read and zero pages are taken ahead of the
// writer, after each FlushInterval's fdatasync, by reading 4–64 MiB ahead
// into memory (segment.Log.Prefault, MADV_POPULATE_READ: nothing is
// dirtied, so nothing more is written back), leaving the appender the
// cheap fault that marks a page writable.
//
// # What a durable append waits for
//
// A durable append waits for its group commit's fdatasync; on a shared VM
// the tail of that wait is the disk's slow requests and the wake-up of the
// thread it completes. The broker's levers are fewer wake-ups and less CPU
// per message, fewer device requests per sync (Zero filling, below), and
// never deleting files under the log's lock (segment.Log.DeleteBefore trims
// a deleted segment in steps without the lock). What was measured and
// tried: NOTES.md.
//
// # Zero filling
//
// Under FlushSync zeroFillLoop keeps the message log written with zeros
// ZeroFillAhead (16 MiB) past its end, at most 2 MiB every 20 ms
// (segment.Log.ZeroFill: direct I/O, never over written bytes; pkg/segment
// doc.go). The group commit's fdatasync then overwrites written blocks: on
// the VM above, three device requests for most syncs instead of four, and
// no extent conversion for a journal to commit on file systems that have
// one. While the log grows faster than 32 MB/s (over a second) nothing is
// filled: group commits are then large, the conversions a small part of
// each sync, and zeros that kept up doubled the disk's writes (one
// producer flat out on one subject stored a fifth to a third fewer
// messages a second). qmq-realtime --zero-fill-ahead sets the distance
// (negative: off); its effect on the latency suite: NOTES.md.
// Where direct I/O is refused (tmpfs) the loop logs it once and
// stops. Stats.ZeroFilled counts the bytes.
//
// # Consumer groups
//
// A group of a subject has one cursor over the consume log shared by its
// consumers; a new group starts at the latest entry unless the pull asks for
// Earliest. A pull first re-delivers the consumer's un-acked entries above
// max(KnownPullSeq, acked) (without new ones in the same answer), unless it
// is pipelined (PullRequest.Pipelined: the consumer has pulls in flight, so
// entries above KnownPullSeq may be on their way to it); otherwise it takes
// entries from the group's returned queue and then from the cursor,
// skipping entries that do not match its tag filter (those are never
// delivered to that group), gives them the consumer's next pull sequences
// (contiguous from 0), writes them to the consumer's pull log and appends a
// PULL action. Tag filters test a 64-bit bloom in each consume-log entry
// first and then the message's tags, so false positives never leak.
//
// Acks are inclusive ranges of pull sequences and move the consumer's acked
// position (acked through Last). An ack whose First is above acked+1 is a lost
// ack: the entries in between are returned in AckResult.Gap (the broker sends
// them to the retry subject) and acked too. A gap of more than 4,096 pull
// sequences (maxGapRetry: wider than any consumer's window of un-acked
// messages should be, so a buggy or hostile client) is not read into
// memory: its entries go back to the group as a dead consumer's do
// (RETURN actions, a returnChunk at a time; AckResult.Returned).
//
// Decisions:
//   - Dead consumers: ReturnUnacked appends the consumer's un-acked entries
//     to the group's returned queue (runs of consume sequences, persisted in
//     the action log and checkpoint) and acks them for that consumer; every
//     pull of the group serves the returned queue before the cursor.
//   - Deliver-at: each consume-log entry carries the message's deliver-at
//     time. PullRequest.HoldUntilDue stops a pull at the first entry that is
//     not due yet (head of line, as QMQ's retry subjects) and reports
//     PullResult.NextDue so the broker can arm a timer. Returned and
//     re-delivered entries are not held (they were due once).
//   - Broadcast subscribers (PullRequest.Broadcast) are groups of their own
//     keyed by the consumer id, with no pull log: pull sequence = consume
//     sequence; re-delivery re-reads the consume log from max(known, acked)+1
//     to the cursor.
//   - ResetGroup moves the cursor (earliest, latest, the first entry appended
//     at or after a time — append times never decrease within a subject) and
//     clears the returned queue; consumers keep their un-acked entries.
//   - Offline/online and liveness are the broker's; RemoveConsumer forgets a
//     consumer for good (FOREVER_OFFLINE) after returning its entries.
//
// # Action log
//
// Every change to a group is an action appended to an in-memory batch and
// then applied to memory, under the group's lock; actionFlushLoop writes and
// fsyncs the batch every ActionFlushInterval (50 ms), and every checkpoint
// does so first. Each action carries the group's version (a counter), so
// replaying an action the checkpoint already holds is a no-op. Pull logs are
// rebuilt from PULL actions; their entries are buffered per consumer (32 KiB)
// and written in bulk, and checkpoints write and sync them. A checkpoint
// also deletes action-log segments before its offset and pull-log segments
// wholly at or below each consumer's acked position.
//
// Because pulls are not made durable before they return, a crash can forget
// the last ActionFlushInterval of pulls and acks. Forgotten pulls go back to
// the cursor and are delivered again (at-least-once); forgotten acks cause
// re-deliveries. A consumer that still holds pull sequences the store lost
// must not ack other messages with them: when a pull's KnownPullSeq or an
// ack's Last is beyond the consumer's pull position, the store voids those
// pull sequences first (VOID action, void pull-log entries), so the stale
// acks land on nothing and new pulls get fresh sequences.
//
// # Checkpoints and recovery
//
// A checkpoint (every CheckpointInterval, on Close, or Checkpoint()) records
// the message-log offset that the consume logs cover, each subject's next and
// minimum sequence, the action-log offset, and every group (cursor, returned
// queue, version, consumers' pull and ack positions). Before writing it the
// consume logs, pull logs, message log and action log are synced (one syncfs
// when more than 32 logs are dirty); then the file is replaced atomically
// (temp, fsync, rename, fsync dir). Recovery:
//
//  1. Load the checkpoint; a damaged one is logged and ignored (full replay).
//  2. Replay the message log from the checkpoint's offset: every record's
//     magic, length and CRC-32C are checked (pkg/segment), each valid record
//     is indexed into its subject's consume log (records already indexed are
//     skipped by sequence).
//  3. A torn tail (invalid bytes at the end of the last segment with no valid
//     record within 16 MiB after them) is cut off; OpenReport.TornMessageTail
//     says where.
//  4. Corruption in the middle of the log (an invalid record followed by valid
//     ones, or in a segment that is not the last) is handled by the documented
//     rule Options.SkipCorrupt: false (default) makes Open fail with an error
//     wrapping ErrCorrupt that names the damaged byte range; true skips the
//     range, logs it, counts it (Stats.CorruptRanges, OpenReport.Corrupt) and
//     fills the lost sequences with holes (size-0 entries never served).
//  5. Consume logs are truncated to the replayed length; subjects' minimum
//     sequences follow the first kept message-log segment.
//  6. Replay the action log from the checkpoint's offset the same way (torn
//     tail cut, version check per group), rewriting pull-log entries. A
//     record with a valid CRC that no live action writes (one that does not
//     parse, a pull naming more than MaxPull entries or a return more than
//     returnChunk) is logged and skipped; void pull sequences are written a
//     chunk at a time, however many a record names.
//  7. Group cursors past a subject's end (possible only under FlushAsync) are
//     pulled back.
//
// Data before the checkpoint offset is not re-scanned; reads check it
// instead (see "Reads" below).
// The crash test (crash_test.go, scripts/crash-store.sh) kills an appending
// child with SIGKILL and checks every acknowledged message after each restart.
//
// # Reads
//
// A group draining a backlog reads consume-log entries 512 at a time and
// published message-log bytes 256 KiB at a time, and keeps them for its
// next pulls (readahead.go; given up once it catches up, so a caught-up
// group reads its few new entries into the pull's pooled scratch instead of
// a buffer of its own); a pull copies the
// messages of each run of adjacent records from there, or reads them with
// one read, into a pooled buffer (PullResult.Release gives it back). The
// checks below run on every copy a pull serves. What a read verifies:
//
//   - Every consume-log entry: its CRC-32C.
//   - A message-log record at an offset below the end Open found (written by
//     an earlier run, whether replayed at Open or before the checkpoint):
//     magic, version, kind, length, CRC-32C over header and payload, and the
//     sequence it holds against the entry's.
//   - A record at or after that end was written by this process: by the
//     appender, or by ReplicateMessages after checking the master's CRC
//     (pkg/segment computes the CRC over the very bytes it writes). Its
//     magic, version, kind, length and sequence are checked, its CRC is not
//     (re-verifying bytes this process wrote took about 6% of the broker's
//     CPU in the fairness benchmark).
//
// A failed check logs the message, counts it in Stats.CorruptReads and never
// serves it. Damage that reaches a record of this run on disk after it was
// written (the page cache dropped it and the disk returns other bytes) is
// not caught here: the message's own CRC-32C, checked by every consumer
// (ParseMessage), catches it end to end, and the next Open (a new run)
// verifies the record again. Every record at or after the end Open found
// was written in this run: while the store is open the log is cut back
// only to offsets at or after it (failed writes), or emptied and restarted
// past it (a replica whose master deleted what it lacks).
//
// # Retention
//
// RunRetention (every RetentionInterval) deletes whole message-log segments,
// oldest first and never the active one, while the next segment's first
// record is older than RetentionAge (so every record of the segment is), or
// while the log is larger than RetentionBytes. Subjects' minimum sequences
// then move up and consume-log segments below them are deleted. Entries not
// yet consumed are deleted too; Stats shows them first: RetentionBoundary,
// SubjectStats.RetentionDropSeq and GroupStats.AtRisk (unconsumed entries of
// a group that the next pass would delete). A pull whose cursor fell below
// the minimum skips forward and reports PullResult.Expired.
//
// # Replication
//
// A slave's store is opened with Options.Replica: clients cannot change it
// (AppendAsync, Pull, Ack, ReturnUnacked, RemoveConsumer and ResetGroup fail
// with ErrReplica) and its two logs are fed from the master's, byte for byte:
//
//	master: ReadMessageTailInto(buf, from, max) / ReadActionLog(from, max) → LogChunk
//	slave:  ReplicateMessages(chunk) / ReplicateActions(chunk)
//	        ReplicaEnds() → the message offset to ask for next and the durable
//	        end (the slave's ack); CommittedEnds() → the action offset
//
// A LogChunk is whole records of one segment, exactly as stored, starting
// at the offset asked for (or at the next segment's base when the rest of
// that segment is padding, or at the log's Start when the offset was
// deleted), and only committed bytes: the message log up to the last
// published group (fdatasynced before it is published under FlushSync;
// under FlushAsync also not past the last fdatasync), the action log up to
// its last sync. An offset past the committed end, negative, or not at the
// start of a valid record fails with ErrBadOffset.
//
// ReplicateMessages validates every record's CRC first (ErrBadChunk:
// nothing of a bad chunk is written), then writes the chunk as it came,
// one run of records (segment.Batch.AppendRun: placed by the master's rule,
// a first record that does not fit in what is left of a segment starts the
// next one, whose base is the previous base plus SegmentSize, and a run
// never crosses a segment's end), so with equal segment sizes every record
// lands at the master's offset (ErrReplicaMismatch otherwise);
// ReplicateActions places an action chunk on a trial batch first, so a
// misplaced one appends nothing either. It writes, fdatasyncs, then indexes the records
// into consume logs with the code recovery uses and publishes them (goodEnd
// last, as the appender does), so the consume logs are derived, not copied.
// ReplicateActions appends each action through the action log's batch and
// applies it under its group's lock exactly as a live action is (version
// check, pull-log entries), then syncs: a checkpoint's action offset never
// runs ahead of the groups it records. Checkpoints, recovery and retention
// run on a replica as on a master, so a replica killed at any point reopens
// from its own files and asks for what follows its durable ends.
//
// Catching up from empty: when the master no longer keeps the message-log
// offset the replica asks for (retention), the chunk starts at the master's
// Start; the replica then drops its own message-log segments, restarts its
// log at that offset and turns the missing sequences into holes below each
// subject's new minimum. The action log cannot skip that way (a group's
// state is the sum of its actions): the master's checkpoints keep action-log
// segments its slave has not copied (Options.ActionLogFloor), and a replica
// whose action log is behind the master's first kept action-log offset gets
// ErrReplicaGap and must be started again from empty with a snapshot
// (CmdSyncCheckpoint, phase 2). A consumer that never received an entry has
// no action and is not replicated (it has nothing to lose).
//
// Failover: an old master rejoining its promoted slave may hold records
// the new master never got. Truncate (truncate.go) cuts a closed store's
// two logs back to the new master's promotion point (record boundaries of
// both, since the new master's logs are a byte-identical prefix up to it).
// A checkpoint at or below the point stays and the next Open replays from
// it (consume logs are cut to what it replays, as after a crash);
// otherwise the checkpoint, consume logs and pull logs are removed first
// (a crash in between only makes Open replay everything) and Open rebuilds
// them from the logs; when the action log no longer starts at 0 the groups
// cannot be rebuilt and the store is wiped (TruncateReport.Wiped) to be
// copied again. Tested with real divergent stores (a crash image whose
// checkpoint lies below the point, a closed store whose checkpoint does
// not, and the wipe). FlushActions commits the buffered actions at once (a
// master handing its group over).
//
// CommitSignal returns a channel closed when either log's committed end
// moves; the master's sync service long-polls on it. Promote (failover)
// turns a replica into a master's store: its logs continue exactly where
// the copy ends (its tentative tail indexed first), so sequences, offsets,
// consumers' positions and append times carry on, and another replica can
// follow it.
//
// Tentative tail: ReadMessageTailInto reads the message log up to its
// written end (MessageTailEnd), past the committed end, so a slave's
// fdatasync overlaps the master's; the chunk's End is still the committed
// end. The bytes past it may be cut: recoverWrites (after a failed write
// or fdatasync) records the cut with noteCut — a generation and the offset
// — before it resets the log, and the next records land at the same
// offsets. MessageCutGen read before and after a tail read tells whether
// the read overlapped a cut; MessageCuts(since) gives the lowest offset cut
// back to after a generation. A replica writes and fdatasyncs the records
// past a chunk's End (ReplicaEnds: written and durable ends, which may lie
// past CommittedEnds) but indexes them only once a later chunk's End
// passes them, so a cut of them is a message-log reset alone
// (CutReplicaTail; a cut below the indexed end fails with
// ErrReplicaMismatch: it needs Truncate). indexTail indexes them from the
// chunks as received, which the replica keeps until an End passes them
// (not copied: the caller must not change a chunk's Data after
// ReplicateMessages; at most maxKeptTail, 16 MiB), and reads back from its
// log only what it did not keep (past that bound, or the padding at a
// segment's end; reading back every chunk it had just written took a
// pread and a copy, 7% of a slave's CPU). A cut drops what was kept past
// it; an End inside a record fails with ErrReplicaMismatch
// (TestReplicaIndexesTheTailFromMemory). A replica that
// reopens indexes its whole log, tail included, as recovery does. A chunk
// that restarts the log at the master's Start must not reach past End.
// The protocol that decides when a slave cuts is realtime's (doc.go,
// "Tentative tail"); TestReplicaTailCutBack runs it against a real failed
// fdatasync.
//
// # Scale and memory
//
// Consume-log and pull-log files are opened through one segment.FilePool
// (an LRU, MaxOpenFiles, default 1024); message-log and action-log segments
// stay open (one descriptor per GiB of message log). Measured in TestScale
// (10,000 subjects, 2,000 consumers): about 570 bytes of heap per subject
// (plus up to 16 KiB of buffered consume-log entries, outside the heap on
// huge pages: see subject.go, pendingBuffers; released when it stays idle
// between two checkpoints) and about 900 bytes per consumer (state,
// pull-log metadata, map entries; plus up to 32 KiB of buffered pull-log
// entries while it pulls). Un-acked entries live in pull-log files, not in
// memory; returned queues are runs of sequences.
//
// # Known limits
//
//   - A pull that cannot append its action (a full action log segment
//     cannot happen with the default sizes) fails without changing state;
//     a full disk makes checkpoints fail (logged) until space returns, while
//     appends fail with ErrIO and pulls go on from memory buffers.
//
// # LOCKS
//
// Lock order, outermost first; no goroutine takes them in another order:
//
//	closeMu (RW)     AppendAsync holds it shared while queuing; Close exclusively.
//	replMu           one replicating goroutine (replica only); taken before
//	                 groupsMu, group.mu and subject.mu.
//	ckptMu           one checkpoint at a time.
//	retMu            one retention pass at a time.
//	groupsMu (RW)    the groups map; creation of a group (and its CREATE action).
//	group.mu         everything in one group and its consumers; held for a
//	                 pull's bookkeeping (consume-log entry reads, tag checks,
//	                 pull-log write, action append) but not while the pulled
//	                 messages are read. Pulls of different groups never wait
//	                 for each other; consumers of one group share this lock.
//	subjectsMu (RW)  the subjects map, the watched names and the subject
//	                 table's one writer; lookups by name read the table
//	                 without it (subjecttable.go).
//	subject.mu (RW)  a subject's visible range and buffered entries; the
//	                 appender takes it once per run of the subject's messages
//	                 in a group and the commit goroutine to publish; readers
//	                 take it shared to copy buffered entries and read entries
//	                 already in the file after releasing it.
//	actionLog.flushMu > actionLog.mu   the action batch (appends take only mu).
//	commit.mu        leaf: CommitSignal's channel (publish, action flush).
//	FilePool.mu, segment.Log.mu, FixedLog.mu   leaf locks inside pkg/segment.
//
// The appender owns subject.next and never takes group locks, so appends
// never wait for pulls; pulls read the message log with pread outside every
// store lock (segment.Log.mu is held shared only for the read).
package store

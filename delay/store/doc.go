// Package store is the storage and scheduling core of the delay server: it
// keeps delayed messages durably and hands each one out at its due time,
// never before it. It knows no network; the server (package delay) feeds it
// with Append, forwards what comes out of Due to realtime brokers, and
// reports back with MarkDispatched.
//
// # Using it
//
//	s, err := store.Open(dir, store.Options{}, clock.Real(), lg)
//	s.Append(msgs, func(rs []store.Result) { ... })  // rs[i].Err: nil = stored
//	for batch := range s.Due() {                    // due order, never early
//		forward(batch)                               // retry until acked
//		s.MarkDispatched(refs(batch))
//	}
//	s.Stats(); s.Sync(); s.Close()
//
// AppendWait and AppendContext are Append for callers that block. A
// forwarder that cannot deliver for a while can Postpone what it was handed
// instead of holding it: the store hands it out again later.
//
// Append takes messages in the pkg/protocol encoding; DeliverAtMillis is the
// due time (0 or a past time means at once). Each message is checked with
// protocol.ParseMessage (CRC and structure) and Limits.CheckView, and refused
// with protocol.ErrTooLarge, protocol.ErrInvalid or protocol.ErrBeyondHorizon
// (due more than Options.Horizon ahead, default two years) — a refused
// message is never stored and never reported stored. The stored bytes are
// the producer's bytes; Due hands out exactly those bytes.
//
// # Files
//
//	dir/LOCK                      flock (pkg/fsutil.LockDir): one process per directory
//	dir/wal/<20-digit base>.wal   message log (write-ahead log), preallocated segments
//	dir/schedule/yyyyMMddHH       one schedule file per hour of due time (UTC)
//	dir/dispatch/yyyyMMddHH       what of that hour has been forwarded
//	dir/checkpoint                replay position and schedule-file sizes
//	dir/id                        the store's ID (source.go)
//	dir/replica                   present in a slave's copy: the ID of the store it copies (replica.go)
//	dir/origin                    in a promoted copy: the store it copied, the hour sizes they share (origin.go)
//
// Byte layouts are drawn next to the code that writes them: wal.go,
// schedulelog.go, dispatchlog.go, checkpoint.go. Every record carries a
// CRC-32C.
//
// # Write path and durability
//
// Append validates in the caller's goroutine and queues the messages.
// writeLoop takes everything queued, writes it with one pwrite into the
// active segment and hands the group to syncLoop; under FlushSync (the
// default) syncLoop runs one fdatasync for every group written meanwhile and
// then completes their callbacks, while writeLoop already writes the next
// group (group commit). Under FlushAsync callbacks complete after the write
// and syncLoop runs fdatasync every FlushInterval. A failed write or sync is
// sticky: every later Append fails with protocol.ErrStoreError until the
// store is reopened.
//
// A full disk is not sticky. Message-log segments are preallocated, so the
// log meets it only when a group needs a new segment: that group fails
// alone (ErrStoreError wrapping ENOSPC), the records it had written into
// the old segment are zeroed and its position taken back (all records of
// one size would otherwise line up after the next group's and read as
// valid after a restart), and the next group tries again. Schedule files
// grow as the replay copies messages into them: a failed schedule write
// stalls the replay, cuts the files back to their hours' sizes (a partial
// write holds space), rewinds the reader to the batch's first record and
// makes Append refuse messages (they could not be scheduled on time) until
// the replay, retrying every second in 64 KiB batches, catches up. The
// checkpoint never passes a batch the replay has not written, so the
// message log is trimmed only behind what the hour files hold and nothing
// acknowledged is lost (each small batch that fits lets a checkpoint trim
// whole segments, which frees space for the next). Stats.Refusing (and the delay
// server's qmq_delay_store_refusing) says why messages are refused.
// A slave's copy (Replica) cuts a file back to its copied size when a
// write fails, so the retry finds the space it needs. TestStore_FullTmpfs
// fills a real tmpfs and frees it again; TestStore_FailedRollTakesBackTheGroup
// restarts after a failed segment; TestReplica_FullTmpfsCutsAFailedWrite
// fills a copy's disk.
//
// # From the message log to the wheel
//
// indexLoop replays the message log, up to what is fdatasynced (under
// FlushAsync: written), into the hour files: a message goes to the hour of
// its due time, or of the time it was appended when it was already due then.
// The schedule files hold full copies, so the message log is trimmed (whole
// segments) as soon as a checkpoint covers it, long before messages are due.
//
// The wheel (pkg/timewheel, 500 ms ticks) holds only index entries — due
// time, hour, offset and size, 16 bytes each (entry.go; no pointers, so the
// wheel keeps its large slots in mapped memory outside the Go heap, where
// only the pages written are resident and the collector never looks) —
// and only for messages due within Window (default 30 min): each hour has
// a load mark, and its messages due at or before the mark are in the wheel
// (or handed out, or dispatched). When an hour's start comes within the
// window its file is scanned (minus its dispatch log) up to now+Window, and
// scanned again each time the window has moved on by Window/6, adding what
// falls due in between; so a message enters the wheel between Window and 5/6
// Window before it is due (or when it is stored, if later), and memory
// follows the messages due within the window, not everything pending. The price is that each hour
// file is read about thirteen times while the window passes over it, mostly
// from the page cache. A replayed message due at or before its hour's mark goes straight
// into the wheel. Hours that have already ended when they are loaded (after
// downtime, or a forward clock jump) are a backlog: they are loaded one by
// one while the wheel holds fewer than MaxBacklog entries, so a long
// backlog streams through memory. Only the schedule files being written or
// read are open (an LRU of MaxOpenFiles handles); thousands of hour files
// cost a directory entry and a small struct each.
//
// fireLoop sleeps until the earliest entry's due time (at most one tick),
// takes the entries whose due time is <= the clock's time at that moment, in
// due order, reads their bytes from the schedule files (neighbouring records
// in one read) and sends them as a batch on Due. Entries are compared with
// the clock when they fire, so a clock that jumps back fires nothing early;
// one that jumps forward is noticed within a tick and everything then due
// fires. A batch is at most FireBatch messages and FireBatchBytes; a receiver
// that does not keep up holds the fire loop back (nothing is lost: unmarked
// messages are fired again after a restart).
//
// # Dispatch logs and the crash window
//
// MarkDispatched appends 12-byte entries (schedule offset + CRC) to the
// hour's dispatch log with a write that returns before MarkDispatched does,
// so a killed process keeps them; indexLoop fdatasyncs dispatch logs every
// CheckpointInterval (default 1 s). On Open every hour not fully dispatched
// is rebuilt from its schedule file minus its dispatch log — all of them,
// not the last two as QMQ does — so:
//
//   - nothing acknowledged is lost (FlushSync; FlushAsync may lose the last
//     FlushInterval on a machine crash, not on a process crash);
//   - after a process crash, the messages sent again are those handed out
//     through Due and not yet passed to MarkDispatched: at most the batches
//     in flight in the server (the realtime broker drops them by message id);
//   - after a machine crash, also those marked within the last
//     CheckpointInterval, unless SyncDispatch is set (then MarkDispatched
//     fdatasyncs before it returns).
//
// # Recovery
//
//  1. The checkpoint (replay position, size and record count of every hour
//     file, all fsynced before it was written) is read; a corrupt one is
//     treated as missing.
//  2. The message log is scanned from the replay position; the first torn
//     or corrupt record ends it. Segments after that point are removed, and
//     the rest of the last segment is zeroed, so new records follow the last
//     valid one. Records there were never acknowledged (their fdatasync had
//     not returned).
//  3. Every schedule file is cut back to its checkpointed size (bytes after
//     it were written after the checkpoint and will be replayed again; a file
//     the checkpoint does not know is removed). The replay is deterministic —
//     same records, same order, same hour (the append time is in the log) —
//     so cut records come back at the same offsets and dispatch entries
//     written for them stay right. A file shorter than its checkpoint means
//     the disk lost fsynced data: what is still valid is kept and the loss
//     is logged.
//  4. Without a checkpoint: if the message log is whole (its first segment
//     starts at 0) every schedule file is rebuilt from it; if it was trimmed,
//     every schedule file is scanned (cutting torn tails) and the replay skips
//     records a file already holds, by the WAL offset each record carries.
//  5. Dispatch logs are counted by size; a torn tail is cut when the hour is
//     loaded. Dispatch logs of hours that no longer exist are removed.
//  6. The replay runs from the checkpoint; hours are loaded once it has
//     caught up with the log found in step 2.
//
// # Schedule keys and Cancel (cancel.go, control.go, schedindex.go)
//
// A message may carry a schedule key (protocol.PropScheduleKey): Append
// refuses a second message of the subject whose key is pending (or being
// appended) with protocol.ErrKeyExists, the same message again (same id)
// with protocol.ErrDuplicate. Cancel names messages by (subject, key) or
// (subject, id) and answers each: nil (cancelled), ErrAlreadyFired,
// ErrNotFound. An in-memory index finds the record — 8 bytes a message for
// ids (per-hour arrays of fingerprints and offsets, searched whole), a map
// entry per keyed message for keys; no strings, no bodies — and the record
// is read to check the names.
//
// The race with firing is decided under Store.mu by one rule: the fire
// loop drops an entry in the cancelled set and raises fireMark to the due
// time of every entry it keeps; Cancel answers "already fired" for a
// message due at or before fireMark, else adds it to the set. fireMark
// starts at the clock at Open (an earlier run, or the master a promoted
// copy came from, handed out nothing due later). Then the cancel is
// written as a control record into the message log (group commit, fdatasync
// under FlushSync) before "cancelled" is answered; a record that cannot be
// written takes the cancel back (an entry already dropped goes back into
// the wheel) and the answer is the error. The replay turns the record into
// a cancel entry of the hour's dispatch log (the offset's top bit set):
// loads skip it like a forwarded one, retention counts it as done, a
// checkpoint does not pass it unless the dispatch logs were fdatasynced,
// and the slave copies it with the dispatch file — the master's --wait-slave
// reply to a cancel waits for the slave to hold it. After a crash the
// records past the checkpoint are replayed again (a duplicate entry is
// harmless); the index and the cancelled set are rebuilt from the hour
// files with messages not yet dispatched — before Open returns when they
// hold at most 64 MiB, else beside the other loops, Cancel waiting and
// keyed appends answering retry later until it is done (hours fully
// dispatched are not indexed: their messages are "not found" after a
// restart).
//
// Reschedule is a cancel whose control record goes on with the message
// itself, its due time changed (same id): the replay writes the cancel
// entry and stores the message like an appended one, so a crash keeps both
// or neither; a rescheduled key stays reserved until the new record is
// indexed.
//
// Timeline and Pending (timeline.go) stream the hour files of a window
// (at most 31 days) in 1 MiB reads, skipping what is dispatched, cancelled
// or handed out; no body is kept, a page is resumed from a cursor (hour,
// offset).
//
// # Retention
//
// An hour whose messages are all marked dispatched and that ended more than
// Keep ago (default 24 h) is dropped: a checkpoint without it is written,
// then its schedule and dispatch files are removed. Message-log segments are
// removed once a checkpoint's replay position is past them.
//
// # Goroutines and locks
//
// writeLoop (owns the active segment), syncLoop (completes appends),
// indexLoop (the only writer of schedule files and the checkpoint; owns the
// replay reader) and fireLoop. Store.mu guards the hour table, the wheel and
// the in-flight table; it is never held during file I/O. dispatchLogs.mu serialises dispatch-log writes; fileCache.mu
// guards open handles. Order: Store.mu is never held while taking the
// others.
//
// # Replication
//
// A master's store is a replication source (source.go). Schedule files
// only grow, and their bytes never change once written (the replay is
// deterministic; after a crash the files are cut back and rebuilt to the
// same bytes); dispatch files only grow; retention removes whole hours. The
// store numbers these changes: a change log, under Store.mu, holds per run
// of the store (a random number at Open) a version and the version of each
// hour's last change, and the message-log position the hour sizes cover.
// Manifest lists the hours changed after a version (every hour for another
// run), with their schedule size and record count, taken under mu together
// with that position, and their dispatch size; ChangeSignal wakes a long
// poll at the next change; ReadSchedule and ReadDispatch return whole
// records of a file below the size the store published (the first record's
// CRC proves the offset is a record start). Manifest reports CaughtUp false
// until the replay has caught up with the log found at Open: before that a
// schedule file may be shorter than a slave's copy of it.
//
// A slave's store is a Replica (replica.go): the hour files only, written
// by WriteSchedule and WriteDispatch at the copy's sizes after every record
// is checked (a dispatch entry is taken only once the copy holds the record
// it names, so a promoted copy never marks a record it lacks), made durable by Commit (fdatasync of each file written, and
// of the directories when files came or went), which also records the
// master's replayed position the copy holds; every few seconds it also
// writes the copy's checkpoint (hour sizes and record counts, all
// fdatasynced before). OpenReplica scans each schedule file from its
// checkpointed size (the whole file when it has none, or is shorter) and
// every dispatch file, and cuts each at its first invalid record. The replica marker names the
// store the copy follows (every store has a random ID from its creation);
// Follow drops a copy of another store, or a master's own directory, and
// starts from empty. Promote writes a checkpoint of the copy (its message
// log starts past the largest message-log offset a copied record names, so
// schedule records stay in increasing WAL order), removes the marker and
// the ID, and Open then recovers the directory as a master's store with a
// new ID, loading every message not dispatched into the wheel; Promote
// first writes the origin file (the followed store's ID and every hour's
// copied sizes). Rejoin turns the directory of that parent store (a
// deposed master's) into a copy of the promoted one: each hour file is cut
// to the shared sizes (a record boundary of both), hours the origin does
// not list and the message log are removed. Open also
// promotes a directory it finds with the marker (a slave that died while
// being promoted, or one started as a master).
//
// # Stats
//
// Stats gives pending messages per hour and in total (counted once
// replayed, within milliseconds of the ack), entries in the wheel, messages
// in flight, the oldest undispatched due time, message-log offsets, and
// counters (appended, rejected, fired, dispatched, corrupt) for the server's
// metrics.
//
// The checkpoint's atomic write, directory fsyncs and the directory lock
// come from pkg/fsutil. The segment files are this package's own (wal.go):
// pkg/segment did not exist when it was written, and its records differ
// (they carry the append time that makes the replay deterministic).
package store

// Package store is the storage and scheduling core of the delay server: it
// keeps delayed messages durably and hands each one out at its due time,
// never before it. It knows no network; the server (package delay) feeds it
// with Append, forwards what comes out of Due to realtime brokers, and
// reports back with MarkDispatched. The longer reasoning behind the rules
// below is in NOTES.md ("Design details").
//
// # Using it
//
//	s, err := store.Open(dir, store.Options{}, clock.Real(), lg)
//	s.Append(msgs, func(rs []store.Result) { ... })  // rs[i].Err: nil = stored
//	for batch := range s.Due() {                    // due order, never early
//		forward(batch)                               // retry until acked
//		s.MarkDispatched(refs(batch))
//	}
//	s.Cancel / Reschedule / Timeline / Pending       // control (cancel.go, control.go, timeline.go)
//	s.Stats(); s.Sync(); s.Close()
//
// AppendWait and AppendContext block; Postpone hands a batch back to be
// fired again later. Append takes pkg/protocol messages (DeliverAtMillis is
// the due time; 0 or past means at once), checks each (ParseMessage, CRC,
// Limits.CheckView) and refuses with ErrTooLarge, ErrInvalid or
// ErrBeyondHorizon (Options.Horizon, default two years); a refused message
// is never stored. Due hands out exactly the producer's bytes.
//
// # Files
//
//	dir/LOCK                      flock: one process per directory
//	dir/log/<20-digit base>.seg   message log (write-ahead log): a pkg/segment Log
//	dir/schedule/yyyyMMddHH       one schedule file per hour of due time (UTC)
//	dir/dispatch/yyyyMMddHH       what of that hour has been forwarded or cancelled
//	dir/checkpoint                replay position and schedule-file sizes
//	dir/id                        the store's ID (source.go)
//	dir/replica                   in a slave's copy: the ID of the store it copies
//	dir/origin                    in a promoted copy: the store it copied and the shared sizes
//
// Byte layouts are drawn next to the code that writes them (messagelog.go,
// schedulelog.go, dispatchlog.go, checkpoint.go); every record carries a
// CRC-32C.
//
// # Write path and durability
//
// writeLoop writes everything queued with one pwrite and hands the group to
// syncLoop, which under FlushSync (default) runs one fdatasync for every
// group written meanwhile before completing their callbacks (group commit);
// under FlushAsync callbacks complete after the write and syncLoop
// fdatasyncs every FlushInterval. A failed write or sync is sticky
// (ErrStoreError until reopened). A full disk is not: a group that needs a
// new segment fails alone (segment.Log.Reset takes its records back), a
// failed schedule write stalls the replay and makes Append refuse until it
// catches up (Stats.Refusing); nothing acknowledged is lost.
//
// # From the message log to the wheel
//
// indexLoop replays the message log (up to what is durable) into the hour
// files; the message log is trimmed once a checkpoint covers it. The wheel
// (pkg/timewheel, 500 ms ticks) holds index entries only (16 bytes: due
// time, hour, offset, size; outside the Go heap) for messages due within
// Window (default 30 min): an hour's file is scanned into the wheel when its
// start comes within the window and again each Window/6. Hours already over
// when loaded are a backlog, loaded while the wheel holds fewer than
// MaxBacklog entries. fireLoop takes the entries due at the clock's time,
// in due order, and sends their bytes on Due; entries are compared with the
// clock when they fire, so a clock jumping back fires nothing early.
//
// # Dispatch logs and the crash window
//
// MarkDispatched appends 12-byte entries to the hour's dispatch log (a
// write, fdatasynced every CheckpointInterval or at once with
// SyncDispatch). On Open every hour not fully dispatched is rebuilt from
// its schedule file minus its dispatch log, so nothing acknowledged is lost
// and a process crash sends again at most the batches in flight (the
// realtime broker drops them by message id).
//
// # Recovery
//
//  1. Read the checkpoint (a corrupt one counts as missing).
//  2. Convert an old-format message log (dir/wal) once (migrate.go).
//  3. Scan the message log from the replay position with pkg/segment's
//     Recover: a torn tail (never acknowledged) is cut; damage followed by
//     valid records, or a missing segment, makes Open fail with ErrCorrupt
//     naming the offset rather than drop acknowledged messages.
//  4. Cut every schedule file back to its checkpointed size; the replay is
//     deterministic (the append time is in the log), so cut records come
//     back at the same offsets. A file shorter than its checkpoint lost
//     fsynced data: what is valid is kept, the loss logged.
//  5. Without a checkpoint, rebuild the schedule files from a whole log, or
//     scan them and skip what they hold (each record carries its WAL offset).
//  6. Cut dispatch logs' torn tails; remove those of hours gone.
//  7. Replay from the checkpoint; load hours once caught up.
//
// # Schedule keys, cancel and reschedule
//
// A message may carry a schedule key (protocol.PropScheduleKey), unique per
// subject among pending messages: a second one is refused (ErrKeyExists),
// the same message again (same id) is ErrDuplicate, and with
// PropScheduleReplace the pending one is cancelled and the new one stored in
// one record. Cancel by (subject, key) or (subject, id) answers nil
// (cancelled), ErrAlreadyFired or ErrNotFound. Ids are indexed in 8 bytes a
// message (per-hour fingerprints and offsets), keys in a map; the record is
// read to check the names.
//
// The race with firing is decided under Store.mu by one rule: the fire loop
// drops an entry in the cancelled set and raises fireMark to the due time
// of every entry it keeps; Cancel answers "already fired" for a message due
// at or before fireMark, else adds it to the set. The cancel is then written
// to the message log (fdatasync under FlushSync) before "cancelled" is
// answered; the replay turns it into a cancel entry of the hour's dispatch
// log (offset's top bit set), which loads skip, retention counts as done
// and the slave copies (--wait-slave answers once the slave holds it).
// Reschedule is a cancel whose record carries the message with its new due
// time (same id): a crash keeps both halves or neither. After a restart the
// index and the cancelled set are rebuilt from the hours not yet dispatched.
// Timeline and Pending stream the hour files of a window (at most 31 days)
// without keeping bodies, in pages resumed from a cursor (hour, offset).
//
// # Retention
//
// An hour fully dispatched that ended more than Keep ago (default 24 h) is
// dropped (a checkpoint without it first, then its files); message-log
// segments go once a checkpoint's replay position is past them.
//
// # Goroutines and locks
//
// writeLoop (the active segment), syncLoop, indexLoop (the only writer of
// schedule files and the checkpoint) and fireLoop. Store.mu guards the hour
// table, the wheel and the in-flight table and is never held during file
// I/O or while taking dispatchLogs.mu or fileCache.mu.
//
// # Replication
//
// A master's store is a source (source.go): schedule files only grow and
// their bytes never change once written, dispatch files only grow, and
// retention removes whole hours. A change log numbers the changes per run
// (a random number at Open); Manifest lists the hours changed after a
// version with their sizes, ChangeSignal wakes a long poll, ReadSchedule and
// ReadDispatch return whole records below the published sizes. A slave's
// store is a Replica (replica.go): the hour files only, written at the
// copy's sizes once every record is checked, made durable by Commit, with
// a checkpoint of its own. Promote turns the copy into a master's store
// (recovered by Open with a new ID; the origin file records the shared
// sizes); Rejoin cuts a deposed master's directory back to them and makes
// it a copy of the promoted one.
//
// # Stats
//
// Pending messages per hour and in total, wheel entries, messages in
// flight, the oldest undispatched due time, message-log offsets, and
// counters (appended, rejected, fired, dispatched, cancelled, corrupt).
//
// The message log is a pkg/segment Log (one record format and one
// recovery path with the realtime broker's logs); its records carry the
// append time that makes the replay deterministic (messagelog.go).
package store

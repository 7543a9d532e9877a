// Package segment holds append-only logs split into segment files: Log, a log
// of variable-size records addressed by byte offset (the realtime message log
// and action log), and FixedLog, a log of fixed-width entries addressed by
// sequence (consume logs, pull logs). Files are named by their zero-padded
// base: the byte offset (Log) or the entry sequence (FixedLog) of their first
// byte or entry, "%020d.seg". FilePool bounds the open file handles of many
// FixedLogs with an LRU. All files go through fsutil.FS, so tests can inject
// a full disk. The package knows nothing about what the records mean.
//
// # Log records
//
//	0       2     3      4             8             12
//	+-------+-----+------+-------------+-------------+----------------+
//	| magic | ver | kind |   length    |   crc32c    | payload        |
//	|  u16  | u8  |  u8  | u32 payload |     u32     | (length bytes) |
//	+-------+-----+------+-------------+-------------+----------------+
//
// Big-endian. magic is 0x514C ("QL"), ver is 1, kind is the caller's (1..255;
// 0 is never written). crc32c is CRC-32C over bytes 0..8 and the payload, so
// a damaged length is caught too. A record never spans two segments: when it
// does not fit in what is left of the current segment, that rest stays zero
// and the record starts the next segment, whose base is the previous base
// plus the segment size. A reader that meets an all-zero header, or fewer
// than 12 bytes before the segment's end, moves to the next segment.
//
// Log segments are preallocated with fallocate (SegmentSize bytes) when they
// are created, so a full disk is reported when a segment is created rather
// than in the middle of a record, and writes do not change the file size.
//
// # Writing
//
// One goroutine writes (Batch, Write); any number read (ReadAt, ReadRecord)
// below what has been written. Sync (fdatasync of every segment written since
// the last Sync) may run on another goroutine while the writer writes the
// next batch; Synced reports the offset up to which data is durable. A write
// or sync that fails poisons the log: every later Write and Sync returns
// ErrPoisoned wrapping the first error, until Reset truncates the log back to
// a known good offset (normally Synced) and reopens its files.
//
// Syncers (NewSyncer) sync like Sync, through descriptors of their own, so
// several fdatasyncs may run at once (a disk serves two at once much faster
// than one after the other). Each descriptor matters: the kernel reports a
// writeback error once to each open file, so of two syncs through one
// descriptor only the first to check would see it, and the other could
// report lost bytes durable. A sync covers what was written before it
// began; segments the writer has left stay listed until one has synced them.
//
// Write copies records into a shared, writable mapping of the segment being
// written (fsutil.Mappable), made at the segment's first write and released
// when the writer moves to the next segment, when Reset cuts the segment or
// at Close. A copy lands in the page cache as pwrite(2) would put it there,
// without a system call: one small append (a producer waiting for each ack)
// costs a memcpy instead of a pwrite through the file system's write path,
// which measured as a fifth of the broker's round trip. Durability does not
// change: the bytes survive the process's crash at once (they are in the
// kernel's page cache), and Sync's fdatasync writes back the pages dirtied
// through the mapping as it does those written by pwrite. A run of records is
// copied one record at a time, in order (copyRecords): a process killed
// mid-copy leaves whole records and then one torn record, as a killed pwrite
// does, where one memmove of the run could leave a zero header before whole
// records (TestLogMappedWriteSurvivesKill). A full disk cannot
// fault a copy, because the segment is fallocated before it is mapped; where
// fallocate is unsupported, with NoPreallocate or NoMmap, or for files that
// are not Mappable (FaultFS), Write uses pwrite. Readers always use pread,
// so they never touch a mapping; the writer copies holding the log's lock for
// reading, and mappings are released only under its write lock. The cost:
// a copy that touches a fresh page takes a page fault, and on ext4 that
// fault waits for a journal commit a concurrent fdatasync is running, so a
// writer that must not wait behind its syncs (a log fsynced per group
// commit) sets NoMmap. Batch.AppendSummed builds a record whose body brings
// its own checked CRC (the record's is combined from it, crccombine.go) and
// refers to bodies of 2 KiB or more instead of copying them; Write then
// uses pwritev (vecwrite.go) or copies the pieces record by record.
//
// Reader reads records in order from an offset up to a limit its caller
// gives (what is written, or what is durable), beside the writer: the delay
// store's replay. A write that cannot create the next segment fails with
// ErrNewSegment (its batch reached no new file; Reset to the batch's start
// takes it back whole). With LargeRecords a record larger than SegmentSize
// (up to MaxRecordSize) starts a segment of its own, sized to it; without
// it such a record is ErrTooLarge. A batch's chunk never crosses a
// segment's start, so each is written within one segment.
//
// # Zero filling (Log.ZeroFill)
//
// A preallocated block is "unwritten": the first write to it must change
// the file's extent map, and the fdatasync after it writes that metadata
// too, one more device round trip (on ext4 without a journal, a write of
// the extent block; with one, a journal commit). A log synced per group
// commit pays it in every sync. ZeroFill writes zeros ahead of the writer,
// with direct I/O on a second descriptor (fsutil.ZeroWriter), syncs them
// and asks the kernel to read the range into the page cache (a write of
// part of a page whose block is written reads the page first; for an
// unwritten block the kernel just zeroes it). The writer then overwrites
// written blocks. Measured on a 2-vCPU VM (ext4, virtio disk) at 20,000
// small records a second with a sync per group: four device requests per
// sync (data, two metadata, cache flush) became three for three syncs in
// four and two for the fourth (the inode's times still change every 4
// ms).
//
// A fill must never land on bytes the writer has written or is writing.
// The writer stores the end of each write in writeTo before it writes and
// then loads filling; ZeroFill stores the start of its range in filling
// and then loads writeTo, and skips the range if the writer is already
// there. Both are sequentially consistent atomics, so at least one of the
// two sees the other: either the fill skips, or the writer waits for the
// fill (on fillMu, which ZeroFill holds throughout) and then writes over
// the zeros. TestLogZeroFillRacesWriter fills right at the end while a
// writer appends, and fails without either half of the handshake.
//
// # Dropping the page cache behind the writer (Log.DropCache)
//
// Every byte a log writes lands in the page cache and stays there until
// memory runs short, so a log that takes hundreds of MB a second grows the
// cache by as much. Growing it is not free: each new page is allocated and
// zeroed, and on a VM whose free memory the host takes back (virtio
// balloon free page reporting) the first touch costs the host a fault too:
// several times the CPU of a write into a page just freed
// (realtime/store/NOTES.md, "The page cache window"). DropCache drops
// what is durable below a given offset; the log's owner calls it from a
// loop with what it wants kept (a window of the newest bytes, where
// consumers and replicas read), and readers further back read the disk.
//
// # Recovery (Log.Recover)
//
//  1. Records are read from a start offset (the caller's checkpoint) to the
//     end; every record's magic, version, length and CRC are checked, and each
//     valid record is handed to the caller.
//  2. At the first invalid record (or an all-zero header) the rest of that
//     segment is searched for a valid record: at most ResyncWindow bytes in
//     the last segment (where a torn write ends), all of it in earlier ones.
//  3. Nothing valid follows and it is the last segment: a torn tail. The log is
//     truncated there (the rest of the segment is zeroed with
//     truncate+fallocate) and Recover reports TornAt.
//  4. Nothing valid follows in a segment that is not the last: the normal end
//     of a segment; reading continues with the next segment.
//  5. Something valid follows: corruption in the middle of the log. With
//     SkipCorrupt the damaged range is skipped (reported in Corrupt, never
//     handed to the caller) and reading resumes at the valid record; without
//     it Recover stops with an error wrapping ErrCorrupt that names the offset.
//
// # Deleting segments (Log.DeleteBefore)
//
// Segments leave the log at once, under its lock; their files go after,
// without it. Each file is renamed to its name plus ".trash" (so a crash
// midway never leaves a short segment in the log: OpenLog removes trash
// files and keeps only whole names), cut down by TrimStep (32 MiB) every
// TrimPause (10 ms) and then removed; the directory is synced last.
// Removing a file frees its blocks, and on a file system mounted with
// discard (ext4 without a journal issues the discards inside the unlink)
// that is a long device operation: on a 2-vCPU VM's virtio disk, removing
// a written 1 GiB file took 370–420 ms. DeleteBefore used to do it holding
// the log's lock, so every write, sync and read of the log waited that
// long; cutting the file down in steps also spreads the discards, so the
// disk serves the writer's syncs in between (a writer syncing 5 KB every
// millisecond beside the deletion: slowest sync 47–73 ms with 16–32 MiB
// steps against 103–144 ms with one unlink). A negative TrimStep removes
// each file at once, still without the lock.
//
// # FixedLog entries
//
// Entry n lives in the segment whose base b satisfies b ≤ n < b+SegmentEntries,
// at byte (n-b)×Width. FixedLogs are not preallocated (thousands of them would
// reserve too much disk); the file grows as entries are written. The caller
// owns the meaning of entries, their validation and the log's length after a
// crash (Truncate).
package segment

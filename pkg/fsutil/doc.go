// Package fsutil holds the file-system helpers every storage package shares:
// a small file-system interface (FS, File) that segment files write through,
// so tests can inject faults such as a full disk (FaultFS); an atomic file
// writer for metadata (WriteFileAtomic: temp file, fsync, rename, fsync the
// directory); SyncDir; and an exclusive directory lock (LockDir).
//
// # Crash safety
//
// WriteFileAtomic leaves either the old or the new content under the final
// name, never a mix: the new bytes go to "<name>.tmp", are fsynced, renamed
// over the final name, and the directory is fsynced so the rename itself is
// durable. A leftover "<name>.tmp" from a crash is overwritten by the next
// write and never read.
//
// File.Sync is fdatasync(2): it makes written data and the metadata needed to
// read it back (the size) durable, which is what append-only logs need.
// File.Allocate is fallocate(2) (mode 0): it reserves blocks so a full disk
// shows up when a segment is created, not in the middle of a record; on file
// systems without it, it falls back to extending the file with Truncate.
package fsutil

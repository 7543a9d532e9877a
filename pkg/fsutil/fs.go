package fsutil

import (
	"io"
	"io/fs"
	"os"
)

// File is the subset of *os.File that storage code uses. Every segment file
// is written and read through it, so a test can wrap it (FaultFS).
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes written data durable (fdatasync).
	Sync() error
	// Truncate changes the file's size.
	Truncate(size int64) error
	// Allocate reserves [off, off+size) on disk (fallocate), extending the
	// file if needed. Falls back to Truncate where fallocate is unsupported.
	Allocate(off, size int64) error
	// Size returns the file's current size.
	Size() (int64, error)
	// Name returns the path the file was opened with.
	Name() string
}

// Mappable is a File that can be written through memory: MapShared reserves
// [0, size) on disk (fallocate, with no fallback) and maps it shared, readable
// and writable. Bytes copied into the mapping are in the page cache at once,
// as a write(2) would leave them: they survive the process's crash, and
// File.Sync (fdatasync) makes them durable. Because the range is allocated
// first, a full disk fails MapShared instead of faulting a later copy.
// Where the range cannot be allocated or mapped, MapShared fails (wrapping
// errors.ErrUnsupported where that is the cause) and the caller writes with
// WriteAt. Only files of OS implement it; FaultFS's files do not.
type Mappable interface {
	File
	MapShared(size int64) ([]byte, error)
}

// ZeroWriter is a File whose blocks can be written with zeros ahead of
// its writer, so that the writer's later fdatasyncs overwrite blocks that
// are already written instead of converting preallocated (unwritten)
// extents, which costs a metadata write per sync. WriteZeros writes zeros
// over [off, off+size) with direct I/O (O_DIRECT): the zeros never sit
// dirty in the page cache, where the writer's next fdatasync, which covers
// the whole file, would have to write them back. off and size must be
// multiples of 4096. Where direct I/O is refused (tmpfs, other systems) it
// fails wrapping errors.ErrUnsupported. Only files of OS implement it.
type ZeroWriter interface {
	WriteZeros(off, size int64) error
}

// CacheDropper is a File whose page cache can be dropped: DropCache asks
// the kernel to let go of the cached pages of [off, off+size)
// (POSIX_FADV_DONTNEED). Clean pages leave memory at once; dirty ones are
// started toward the disk and stay until written. Nothing written is lost:
// a later read reads the disk. A log writer that drops what it has synced
// and left behind keeps reusing the same memory instead of growing the
// page cache with every byte it writes (see pkg/segment, "Dropping the page
// cache behind the writer"). Only files of OS implement it.
type CacheDropper interface {
	DropCache(off, size int64) error
}

// FS opens files and changes directories. OS is the real one.
type FS interface {
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	Remove(name string) error
	RemoveAll(name string) error
	Rename(from, to string) error
	MkdirAll(name string, perm fs.FileMode) error
	ReadDir(name string) ([]fs.DirEntry, error)
	// SyncDir fsyncs a directory so entries created, renamed or removed in it
	// are durable.
	SyncDir(name string) error
	// SyncFS makes every file of the file system holding name durable
	// (syncfs(2)): one call instead of thousands of fsyncs.
	SyncFS(name string) error
}

// OS is the operating system's file system.
var OS FS = osFS{}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Remove(name string) error                     { return os.Remove(name) }
func (osFS) RemoveAll(name string) error                  { return os.RemoveAll(name) }
func (osFS) Rename(from, to string) error                 { return os.Rename(from, to) }
func (osFS) MkdirAll(name string, perm fs.FileMode) error { return os.MkdirAll(name, perm) }
func (osFS) ReadDir(name string) ([]fs.DirEntry, error)   { return os.ReadDir(name) }
func (osFS) SyncDir(name string) error                    { return SyncDir(name) }

type osFile struct{ *os.File }

func (f osFile) Size() (int64, error) {
	st, err := f.File.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// SyncDir fsyncs the directory dir.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

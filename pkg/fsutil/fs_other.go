//go:build !linux

package fsutil

import (
	"errors"
	"io/fs"
)

// SyncFS reports an error where syncfs(2) does not exist; callers then fsync
// each file.
func (osFS) SyncFS(name string) error {
	return &fs.PathError{Op: "syncfs", Path: name, Err: errors.ErrUnsupported}
}

// Sync is fsync where fdatasync does not exist.
func (f osFile) Sync() error { return f.File.Sync() }

// Allocate extends the file with Truncate where fallocate does not exist.
func (f osFile) Allocate(off, size int64) error {
	cur, err := f.Size()
	if err != nil {
		return err
	}
	if off+size > cur {
		return f.File.Truncate(off + size)
	}
	return nil
}

// Unmap is never needed where files are not Mappable.
func Unmap(b []byte) error { return nil }

// PopulateRead does nothing where mappings are not used.
func PopulateRead(b []byte) error { return nil }

// WriteZeros is unsupported where direct I/O is not used.
func (f osFile) WriteZeros(off, size int64) error {
	return &fs.PathError{Op: "write zeros", Path: f.File.Name(), Err: errors.ErrUnsupported}
}

// DropCache does nothing where the page cache cannot be advised.
func (f osFile) DropCache(off, size int64) error { return nil }

// ReleaseMapped does nothing where mappings are not used.
func ReleaseMapped(b []byte) error { return nil }

//go:build linux

package fsutil

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// SyncFS is syncfs(2).
func (osFS) SyncFS(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	defer d.Close()
	nr := sysSyncfs
	if nr < 0 {
		return &fs.PathError{Op: "syncfs", Path: name, Err: errors.ErrUnsupported}
	}
	if _, _, errno := syscall.Syscall(uintptr(nr), d.Fd(), 0, 0); errno != 0 {
		return &fs.PathError{Op: "syncfs", Path: name, Err: errno}
	}
	return nil
}

// Sync is fdatasync(2).
func (f osFile) Sync() error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			if err != nil {
				return &fs.PathError{Op: "fdatasync", Path: f.File.Name(), Err: err}
			}
			return nil
		}
	}
}

// Allocate is fallocate(2), falling back to Truncate where it is unsupported.
func (f osFile) Allocate(off, size int64) error {
	for {
		err := syscall.Fallocate(int(f.Fd()), 0, off, size)
		switch {
		case err == nil:
			return nil
		case err == syscall.EINTR:
			continue
		case errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS):
			cur, serr := f.Size()
			if serr != nil {
				return serr
			}
			if off+size > cur {
				return f.File.Truncate(off + size)
			}
			return nil
		default:
			return &fs.PathError{Op: "fallocate", Path: f.File.Name(), Err: err}
		}
	}
}

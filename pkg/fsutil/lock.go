package fsutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ErrLocked means another process (or another open store in this process)
// holds the directory's lock.
var ErrLocked = errors.New("fsutil: directory is locked by another user")

// DirLock is an exclusive advisory lock (flock) on a directory's LOCK file.
type DirLock struct{ f *os.File }

// LockDir takes the exclusive lock of dir without waiting; it returns an error
// wrapping ErrLocked if someone else holds it. The lock dies with the process.
func LockDir(dir string) (*DirLock, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, FileMode)
	if err != nil {
		return nil, fmt.Errorf("fsutil: lock %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, fmt.Errorf("fsutil: lock %s: %w", dir, err)
	}
	return &DirLock{f: f}, nil
}

// Unlock releases the lock.
func (l *DirLock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	err := l.f.Close()
	l.f = nil
	return err
}

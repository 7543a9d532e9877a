package store

import (
	"fmt"
	"os"
	"syscall"
)

// The atomic checkpoint write, directory fsync and directory lock come from
// pkg/fsutil; these two act on an *os.File directly.

// fdatasync flushes f's data (and the metadata needed to read it back).
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}

// preallocate reserves size bytes for f so that appends do not grow the file
// and fdatasync has no size change to journal. Where fallocate is not
// supported the file is extended sparsely instead.
func preallocate(f *os.File, size int64) error {
	err := syscall.Fallocate(int(f.Fd()), 0, 0, size)
	if err == nil {
		return nil
	}
	if err == syscall.EOPNOTSUPP || err == syscall.ENOSYS || err == syscall.EINVAL {
		return f.Truncate(size)
	}
	return fmt.Errorf("fallocate %s: %w", f.Name(), err)
}

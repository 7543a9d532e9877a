//go:build linux

package fsutil

import (
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"unsafe"
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

// DropCache is posix_fadvise(POSIX_FADV_DONTNEED) over [off, off+size)
// (see CacheDropper).
func (f osFile) DropCache(off, size int64) error {
	if err := unix.Fadvise(int(f.Fd()), off, size, unix.FADV_DONTNEED); err != nil {
		return &fs.PathError{Op: "fadvise", Path: f.File.Name(), Err: err}
	}
	return nil
}

// ReleaseMapped takes the pages of b, a part of a MapShared mapping that
// starts and ends on page boundaries, out of the process's mapping
// (madvise(MADV_DONTNEED)): for a shared file mapping the pages stay in
// the page cache, dirty ones still dirty, and the next access maps them
// again. Until then DropCache can drop them; it skips mapped pages.
func ReleaseMapped(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if err := unix.Madvise(b, unix.MADV_DONTNEED); err != nil {
		return &fs.PathError{Op: "madvise", Path: "", Err: err}
	}
	return nil
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

// MapShared allocates [0, size) with fallocate(2) and maps it with mmap(2),
// MAP_SHARED, PROT_READ|PROT_WRITE (see Mappable).
func (f osFile) MapShared(size int64) ([]byte, error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, &fs.PathError{Op: "mmap", Path: f.File.Name(), Err: syscall.EINVAL}
	}
	for {
		err := syscall.Fallocate(int(f.Fd()), 0, 0, size)
		if err == syscall.EINTR {
			continue
		}
		if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
			return nil, &fs.PathError{Op: "fallocate", Path: f.File.Name(), Err: errors.ErrUnsupported}
		}
		if err != nil {
			return nil, &fs.PathError{Op: "fallocate", Path: f.File.Name(), Err: err}
		}
		break
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, &fs.PathError{Op: "mmap", Path: f.File.Name(), Err: err}
	}
	return b, nil
}

// Unmap releases a mapping made by MapShared. Bytes written through it stay
// in the page cache, to be made durable by File.Sync.
func Unmap(b []byte) error {
	if err := syscall.Munmap(b); err != nil {
		return &fs.PathError{Op: "munmap", Path: "", Err: err}
	}
	return nil
}

// PopulateRead makes the pages of b, a part of a MapShared mapping that
// starts on a page boundary, present now (madvise(MADV_POPULATE_READ)), as
// reading each would: a page of a preallocated, never written part of a
// file is allocated and zeroed then, not when it is first written. It
// dirties nothing. Kernels before 5.14 answer EINVAL.
func PopulateRead(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	for {
		err := syscall.Madvise(b, madvPopulateRead)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "madvise", Path: "", Err: err}
		}
		return nil
	}
}

// madvPopulateRead is MADV_POPULATE_READ (Linux 5.14), which package
// syscall does not name.
const madvPopulateRead = 22

// zeroBlockSize is the unit of WriteZeros: one aligned buffer of zeros,
// shared (it is only read).
const zeroBlockSize = 1 << 20

var zeroBlock = sync.OnceValue(func() []byte {
	b := make([]byte, zeroBlockSize+directAlign)
	skip := directAlign - int(uintptr(unsafe.Pointer(&b[0]))%directAlign)
	return b[skip%directAlign:][:zeroBlockSize]
})

// directAlign is the buffer and offset alignment WriteZeros keeps for
// O_DIRECT (a page: enough for any logical block size up to 4 KiB).
const directAlign = 4096

// WriteZeros writes zeros over [off, off+size) through a second descriptor
// opened O_DIRECT (see ZeroWriter), then fdatasyncs it so that the blocks'
// change from unwritten to written is on disk before the writer's own
// syncs come, and starts reading the range into the page cache
// (POSIX_FADV_WILLNEED): a write of part of a page that is not cached
// must read the page first once its block is written (for an unwritten
// block the kernel just zeroes the page), which would put a synchronous
// read in front of every fourth kilobyte the writer appends.
func (f osFile) WriteZeros(off, size int64) error {
	if off%directAlign != 0 || size%directAlign != 0 || size < 0 {
		return &fs.PathError{Op: "write zeros", Path: f.File.Name(), Err: syscall.EINVAL}
	}
	d, err := os.OpenFile(f.File.Name(), os.O_WRONLY|syscall.O_DIRECT, 0)
	if err != nil {
		if errors.Is(err, syscall.EINVAL) {
			err = fmt.Errorf("%w: %w", errors.ErrUnsupported, err)
		}
		return &fs.PathError{Op: "open O_DIRECT", Path: f.File.Name(), Err: err}
	}
	defer d.Close()
	zeros := zeroBlock()
	start, total := off, size
	for size > 0 {
		n := min(size, zeroBlockSize)
		if _, err := d.WriteAt(zeros[:n], off); err != nil {
			if errors.Is(err, syscall.EINVAL) {
				err = fmt.Errorf("%w: %w", errors.ErrUnsupported, err)
			}
			return &fs.PathError{Op: "write zeros", Path: f.File.Name(), Err: err}
		}
		off, size = off+n, size-n
	}
	if err := (osFile{d}).Sync(); err != nil {
		return err
	}
	_ = unix.Fadvise(int(f.Fd()), start, total, unix.FADV_WILLNEED) // a hint: nothing to do if refused
	return nil
}

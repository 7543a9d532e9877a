//go:build unix

package timewheel

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapMemory returns size bytes of private anonymous memory, outside the Go
// heap. Pages cost memory only once written.
func mapMemory(size int) ([]byte, error) {
	return unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
}

// unmapMemory returns memory from mapMemory to the system.
func unmapMemory(b []byte) { _ = unix.Munmap(b) }

// dropMemory returns the whole pages of b, part of a mapping from
// mapMemory, to the system; they read as zeros afterwards. Pages b shares
// with neighbouring memory are left alone.
func dropMemory(b []byte) {
	page := uintptr(unix.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	from := (start + page - 1) &^ (page - 1)
	to := (start + uintptr(len(b))) &^ (page - 1)
	if to > from {
		_ = unix.Madvise(b[from-start:to-start], unix.MADV_DONTNEED)
	}
}

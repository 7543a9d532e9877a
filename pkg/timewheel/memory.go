//go:build unix

package timewheel

import "golang.org/x/sys/unix"

// mapMemory returns size bytes of private anonymous memory, outside the Go
// heap. Pages cost memory only once written.
func mapMemory(size int) ([]byte, error) {
	return unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
}

// unmapMemory returns memory from mapMemory to the system.
func unmapMemory(b []byte) { _ = unix.Munmap(b) }

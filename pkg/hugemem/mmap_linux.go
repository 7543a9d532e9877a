package hugemem

import (
	"golang.org/x/sys/unix"
)

// mapChunk returns n bytes of anonymous memory outside the Go heap,
// advised for huge pages, and whether it is a mapping (false: the kernel
// refused and the bytes come from the heap).
func mapChunk(n int) ([]byte, bool) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]byte, n), false
	}
	advise(b)
	return b, true
}

// releaseChunk gives a mapped chunk's pages back to the kernel; the next
// touch of each faults in a zeroed page.
func releaseChunk(b []byte) { _ = unix.Madvise(b, unix.MADV_DONTNEED) }

// unmapChunk unmaps a chunk that nothing can reach any more.
func unmapChunk(b []byte) { _ = unix.Munmap(b) }

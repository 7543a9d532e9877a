package hugemem

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapChunk returns n bytes of anonymous memory outside the Go heap,
// advised for huge pages, and whether it is a mapping (false: the kernel
// refused and the bytes come from the heap). A chunk of at least PageSize
// bytes starts on a PageSize boundary: the kernel places anonymous
// mappings on any 4 KiB boundary, and the parts of a mapping outside whole
// aligned 2 MiB ranges get ordinary pages (a quarter of an 8 MiB chunk on
// average), each a fault of its own on first touch and a TLB entry of its
// own after. So it maps PageSize more than asked and unmaps the slack on
// either side of the aligned range, and it maps whole huge pages (the
// chunk's capacity, past its length, rounds its size up to a multiple of
// PageSize): a slab's chunk of 510 slots of 16,440 bytes is 4,208 bytes
// short of 8 MiB, and its last 2 MiB were ~511 faults of ordinary pages.
func mapChunk(n int) ([]byte, bool) {
	extra, size := 0, n
	if n >= PageSize {
		extra, size = PageSize, (n+PageSize-1)/PageSize*PageSize
	}
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(size+extra), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]byte, n), false
	}
	start := uintptr(p)
	skip := uintptr(0)
	if extra > 0 {
		skip = (PageSize - start%PageSize) % PageSize
		if skip > 0 {
			_ = unix.MunmapPtr(p, skip)
		}
		if tail := uintptr(extra) - skip; tail > 0 {
			_ = unix.MunmapPtr(unsafe.Add(p, skip+uintptr(size)), tail)
		}
	}
	b := unsafe.Slice((*byte)(unsafe.Add(p, skip)), size)
	advise(b)
	return b[:n], true
}

// releaseChunk gives a mapped chunk's pages back to the kernel; the next
// touch of each faults in a zeroed page.
func releaseChunk(b []byte) { _ = unix.Madvise(b, unix.MADV_DONTNEED) }

// unmapChunk unmaps a chunk that nothing can reach any more (all of its
// capacity: mapChunk maps whole huge pages).
func unmapChunk(b []byte) { _ = unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(cap(b))) }

package realtime

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePageSize is the size of a transparent huge page on x86-64 and arm64
// with 4 KiB pages.
const hugePageSize = 2 << 20

// makeHugeSlots returns n zeroed uint64s backed, where the kernel allows
// it, by transparent huge pages: a big table read at random (the dedupe
// table, one lookup per stored message) otherwise costs a TLB miss per
// lookup on top of the cache miss. It asks with madvise(MADV_HUGEPAGE) on
// the 2 MiB-aligned part of a slightly bigger allocation, then
// MADV_COLLAPSE for memory already faulted in; a kernel that refuses
// either (THP "never", old kernels) leaves ordinary pages, which only
// costs speed.
func makeHugeSlots(n int) []uint64 {
	const perPage = hugePageSize / 8
	if n < perPage {
		return make([]uint64, n)
	}
	raw := make([]uint64, n+perPage)
	skip := 0
	if rem := uintptr(unsafe.Pointer(&raw[0])) % hugePageSize; rem != 0 {
		skip = int(hugePageSize-rem) / 8
	}
	slots := raw[skip : skip+n : skip+n]
	whole := (n / perPage) * perPage
	if whole > 0 {
		region := unsafe.Slice((*byte)(unsafe.Pointer(&slots[0])), whole*8)
		if unix.Madvise(region, unix.MADV_HUGEPAGE) == nil {
			_ = unix.Madvise(region, unix.MADV_COLLAPSE)
		}
	}
	return slots
}

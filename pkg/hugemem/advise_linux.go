package hugemem

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// advise asks for huge pages on the 2 MiB-aligned part of b (which must not
// move: a heap allocation of at least PageSize bytes does not). A kernel
// that refuses (THP "never", an old kernel) leaves ordinary pages.
func advise(b []byte) {
	if len(b) < PageSize {
		return
	}
	start := uintptr(unsafe.Pointer(&b[0]))
	skip := int((PageSize - start%PageSize) % PageSize)
	whole := (len(b) - skip) / PageSize * PageSize
	if whole <= 0 {
		return
	}
	region := b[skip : skip+whole]
	if unix.Madvise(region, unix.MADV_HUGEPAGE) == nil {
		_ = unix.Madvise(region, unix.MADV_COLLAPSE)
	}
}

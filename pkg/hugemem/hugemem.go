package hugemem

import "unsafe"

// PageSize is the size of a transparent huge page on x86-64 and arm64 with
// 4 KiB base pages.
const PageSize = 2 << 20

// Uint64s returns n zeroed uint64s that start on a 2 MiB boundary when they
// span at least one huge page (so every one of their pages can be huge),
// advised for huge pages. Below PageSize bytes it is a plain allocation.
func Uint64s(n int) []uint64 {
	const perPage = PageSize / 8
	if n < perPage {
		return make([]uint64, n)
	}
	raw := make([]uint64, n+perPage)
	skip := 0
	if rem := uintptr(unsafe.Pointer(&raw[0])) % PageSize; rem != 0 {
		skip = int(PageSize-rem) / 8
	}
	words := raw[skip : skip+n : skip+n]
	advise(unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n*8))
	return words
}

package testutil

// DropSlack is how many of a range's n pages may stay cached after the
// range was dropped with POSIX_FADV_DONTNEED: the kernel skips pages it
// cannot take at that moment (a page still in another CPU's LRU batch, or
// the large folio holding it), so a few just-written pages may survive a
// drop. An eighth of the range, at least one 128 KiB folio (32 pages).
func DropSlack(n int) int { return max(32, n/8) }

//go:build !linux

package testutil

import "testing"

// CachedPages is Linux-only (mincore); elsewhere it skips the test.
func CachedPages(t testing.TB, path string, off, size int64) (cached, pages int) {
	t.Helper()
	t.Skip("page cache residency is read with Linux's mincore")
	return 0, 0
}

// RequireDroppablePageCache skips the test where the page cache cannot be
// dropped by advice.
func RequireDroppablePageCache(t testing.TB, dir string) {
	t.Helper()
	t.Skip("POSIX_FADV_DONTNEED is used on Linux only")
}

package testutil

import (
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CachedPages reports how many of the pages of [off, off+size) of the file
// at path are in the page cache (mincore(2) over a read-only mapping,
// which itself brings nothing in), and how many pages the range spans.
func CachedPages(t testing.TB, path string, off, size int64) (cached, pages int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := int64(os.Getpagesize())
	start := off / page * page
	m, err := unix.Mmap(int(f.Fd()), start, int(off+size-start), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap %s: %v", path, err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (int64(len(m))+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore %s: %v", path, errno)
	}
	for _, v := range vec {
		if v&1 != 0 {
			cached++
		}
	}
	return cached, len(vec)
}

// RequireDroppablePageCache skips the test when the file system holding
// dir keeps a written, synced file's pages in memory after
// POSIX_FADV_DONTNEED (tmpfs, whose pages are the file).
func RequireDroppablePageCache(t testing.TB, dir string) {
	t.Helper()
	f, err := os.CreateTemp(dir, "dropcheck")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Skipf("fadvise refused on %s: %v", dir, err)
	}
	if cached, _ := CachedPages(t, f.Name(), 0, 64<<10); cached > 0 {
		t.Skipf("the file system of %s keeps dropped pages (%d cached)", dir, cached)
	}
}

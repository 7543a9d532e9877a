//go:build linux

package segment

import (
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Prefault brings the pages ahead of the writer into memory (mincore shows
// them resident where they were not), clips to the segment being written,
// and does nothing where there is no mapping.
func TestLogPrefault(t *testing.T) {
	const segmentSize = 64 << 20 // well past the kernel's readahead around faults (8 MiB here)
	l, err := OpenLog(t.TempDir(), LogOptions{SegmentSize: segmentSize})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	writeRecords(t, l, 0, 3)
	end := l.End()
	if !l.Mapped(end - 1) {
		t.Skip("the log is not written through a mapping here")
	}
	page := int64(os.Getpagesize())
	// Well past what the kernel's readahead around the writer's faults
	// brings in.
	next := (end/page+1)*page + 32<<20
	if resident(t, l, next, 16*page) != 0 {
		t.Skip("fresh pages of a preallocated segment are already resident here")
	}
	to := next + 16*page
	if got := l.Prefault(end, to); got != to {
		t.Fatalf("Prefault stopped at %d, want %d", got, to)
	}
	if n := resident(t, l, next, 16*page); n != 16 {
		t.Fatalf("%d of 16 pages ahead resident after Prefault", n)
	}
	if got := l.Prefault(end, segmentSize+page); got != segmentSize {
		t.Fatalf("Prefault past the segment stopped at %d, want its end %d", got, int64(segmentSize))
	}
	if got := l.Prefault(end+5, end+5); got != end+5 {
		t.Fatalf("an empty range returned %d", got)
	}

	unmapped, err := OpenLog(t.TempDir(), LogOptions{SegmentSize: segmentSize, NoMmap: true})
	if err != nil {
		t.Fatal(err)
	}
	defer unmapped.Close()
	writeRecords(t, unmapped, 0, 3)
	if got := unmapped.Prefault(unmapped.End(), unmapped.End()+page); got != unmapped.End() {
		t.Fatalf("Prefault without a mapping returned %d", got)
	}
}

// resident counts the pages of [off, off+n) in l's current mapping that
// are in memory.
func resident(t *testing.T, l *Log, off, n int64) int {
	t.Helper()
	l.mu.RLock()
	defer l.mu.RUnlock()
	s := l.segmentFor(off)
	if s == nil || s.mapped == nil {
		t.Fatal("no mapping")
	}
	page := int64(os.Getpagesize())
	vec := make([]byte, n/page)
	region := s.mapped[off-s.base : off-s.base+n]
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&region[0])), uintptr(len(region)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	count := 0
	for _, v := range vec {
		count += int(v & 1)
	}
	return count
}

package segment

import (
	"os"

	"github.com/qmq-go/qmq/pkg/fsutil"
)

// Prefault readies, ahead of the writer, the pages of the segment being
// written through a mapping that will hold [from, to): it makes them
// present (fsutil.PopulateRead), so that the writer's first copy into each
// takes only the fault that marks it writable. A fault on a fresh page of
// a preallocated segment also allocates and zeroes it, most of the cost of
// an append that crosses a page. Nothing is dirtied: no extra write-back. Only the segment holding from is touched, and
// only while it is mapped. It returns where it stopped: to, clipped to that
// segment, or from when it did nothing (no mapping, or the kernel refuses).
// Any goroutine may call it; it holds the log's lock for reading, so the
// mapping stays while it works.
func (l *Log) Prefault(from, to int64) int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	s := l.segmentFor(from)
	if s == nil || s.mapped == nil || from >= to {
		return from
	}
	page := int64(os.Getpagesize())
	start := (from - s.base) / page * page
	stop := min(to-s.base, int64(len(s.mapped)))
	if stop <= start {
		return from
	}
	if err := fsutil.PopulateRead(s.mapped[start:stop]); err != nil {
		return from
	}
	return s.base + stop
}

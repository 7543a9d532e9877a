package segment

import (
	"os"

	"github.com/qmq-go/qmq/pkg/fsutil"
)

// DropCache drops from the page cache the log's durable bytes below
// below (clipped to Synced) that an earlier call has not dropped, and
// returns the range it dropped (from == to when nothing; to is where the
// next call starts). A part of the segment being written through a
// mapping is taken out of the mapping first (fsutil.ReleaseMapped), since
// the kernel keeps mapped pages. Readers of those bytes read the disk
// afterwards; nothing written is lost, and nothing not yet durable is
// touched. Files that are not fsutil.CacheDropper are skipped. One
// goroutine calls it (the log's owner, from a loop of its own); it holds
// the log's lock for reading, as the writer does, so it runs beside writes
// and syncs. See doc.go, "Dropping the page cache behind the writer".
func (l *Log) DropCache(below int64) (from, to int64) {
	page := int64(os.Getpagesize())
	below = min(below, l.synced.Load()) / page * page
	l.mu.RLock()
	defer l.mu.RUnlock()
	if len(l.segs) == 0 {
		return l.dropped.Load(), l.dropped.Load()
	}
	from = max(l.dropped.Load(), l.segs[0].base)
	if below <= from {
		return from, from
	}
	for _, s := range l.segs {
		lo, hi := max(from, s.base)-s.base, min(below, s.end())-s.base
		if hi <= lo {
			continue
		}
		lo, hi = lo/page*page, hi/page*page // whole pages of the file, below below
		if hi <= lo {
			continue
		}
		if s.mapped != nil {
			_ = fsutil.ReleaseMapped(s.mapped[lo:min(hi, int64(len(s.mapped)))]) // a hint: the pages then stay cached
		}
		if d, ok := s.f.(fsutil.CacheDropper); ok {
			_ = d.DropCache(lo, hi-lo) // a hint, as above
		}
	}
	l.dropped.Store(below)
	return from, below
}

package segment

import (
	"errors"
	"fmt"
	"math"

	"github.com/qmq-go/qmq/pkg/fsutil"
)

// noFill is Log.filling when no ZeroFill is writing.
const noFill = math.MaxInt64

// zeroFillAlign is the alignment of what ZeroFill writes (direct I/O).
const zeroFillAlign = 4096

// ZeroFill writes zeros over the part of [from, to) that lies in the
// segment being written, ahead of the writer, so that the writer's
// fdatasyncs there overwrite written blocks instead of converting the
// segment's preallocated (unwritten) extents: on ext4 each conversion is a
// metadata write of its own inside the sync, and with a journal a commit
// (see doc.go, Zero filling). The range is shrunk to 4 KiB boundaries of
// the file and never starts below the end the writer has written or is
// writing; a writer that reaches a range being filled waits for it. It
// returns where it stopped: the end of what it filled, or from when it
// filled nothing (nothing ahead in range, the segment is written through a
// mapping, or the log is closed). Files that cannot take direct I/O fail
// with an error wrapping errors.ErrUnsupported. Any one goroutine may call
// it besides the writer.
func (l *Log) ZeroFill(from, to int64) (int64, error) {
	l.fillMu.Lock()
	defer l.fillMu.Unlock()
	l.mu.RLock()
	var s *logSegment
	if n := len(l.segs); n > 0 && !l.closed {
		s = l.segs[n-1]
	}
	mapped := s != nil && s.mapped != nil
	l.mu.RUnlock()
	if s == nil || mapped {
		return from, nil
	}
	zw, ok := s.f.(fsutil.ZeroWriter)
	if !ok {
		return from, fmt.Errorf("segment: zero fill %s: %w", FileName(s.base), errors.ErrUnsupported)
	}
	start := max(from, s.base, l.end.Load(), l.writeTo.Load()) - s.base
	start = (start + zeroFillAlign - 1) / zeroFillAlign * zeroFillAlign
	stop := (min(to, s.end()) - s.base) / zeroFillAlign * zeroFillAlign
	if stop <= start {
		return from, nil
	}
	l.filling.Store(s.base + start)
	defer l.filling.Store(noFill)
	if w := l.writeTo.Load(); w > s.base+start {
		return from, nil // the writer got there first
	}
	if err := zw.WriteZeros(start, stop-start); err != nil {
		return from, fmt.Errorf("segment: zero fill %s: %w", FileName(s.base), err)
	}
	return s.base + stop, nil
}

// awaitFill announces that the writer is about to write up to to and, if
// a ZeroFill is writing there, waits for it to finish.
func (l *Log) awaitFill(to int64) {
	l.writeTo.Store(to)
	if to > l.filling.Load() {
		l.fillMu.Lock()
		l.fillMu.Unlock() //nolint:staticcheck // waiting for the fill is the point
	}
}

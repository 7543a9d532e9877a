package store

import (
	"fmt"
	"sort"

	"github.com/qmq-go/qmq/pkg/segment"
	"go.uber.org/zap"
)

// retentionReport says what a retention pass deleted.
type retentionReport struct {
	// Segments and Bytes count the message-log segments deleted.
	Segments int
	Bytes    int64
	// Start is the message-log offset of the first byte kept.
	Start int64
}

// runRetention deletes whole message-log segments that are older than
// RetentionAge (every record in them is) or that push the log over
// RetentionBytes, oldest first and never the active one, then raises each
// subject's minimum sequence and deletes consume-log segments below it.
// Entries no group consumed yet are deleted too; Stats shows them before.
func (s *Store) runRetention() (retentionReport, error) {
	s.retMu.Lock()
	defer s.retMu.Unlock()
	if s.isClosed() {
		return retentionReport{}, ErrClosed
	}
	boundary := s.retentionBoundary()
	before := s.msgLog.Segments()
	n, err := s.msgLog.DeleteBefore(boundary)
	rep := retentionReport{Segments: n, Start: s.msgLog.Start()}
	for i := 0; i < n && i < len(before); i++ {
		rep.Bytes += before[i].Size
	}
	if err != nil {
		return rep, fmt.Errorf("%w: %w", ErrIO, err)
	}
	if n == 0 {
		return rep, nil
	}
	if err := s.raiseMins(rep.Start); err != nil {
		return rep, err
	}
	s.lg.Info("retention deleted message-log segments", zap.Int("segments", n), zap.Int64("bytes", rep.Bytes), zap.Int64("start", rep.Start))
	return rep, nil
}

func (s *Store) subjectList() []*subject {
	s.subjectsMu.RLock()
	defer s.subjectsMu.RUnlock()
	out := make([]*subject, 0, len(s.subjects))
	for _, sj := range s.subjects {
		out = append(out, sj)
	}
	return out
}

// retentionBoundary returns the offset below which retention deletes now.
func (s *Store) retentionBoundary() int64 {
	segs := s.msgLog.Segments()
	if len(segs) < 2 {
		return s.msgLog.Start()
	}
	now := s.opts.Clock().UnixMilli()
	var total int64
	for _, sg := range segs {
		total += sg.Size
	}
	good := s.goodEnd.Load()
	boundary := segs[0].Base
	for i := 0; i+1 < len(segs); i++ {
		next := segs[i+1]
		if next.Base > good {
			break // the active segment and what follows stay
		}
		byAge := s.opts.RetentionAge > 0 && s.firstTimestamp(next) < now-s.opts.RetentionAge.Milliseconds()
		bySize := s.opts.RetentionBytes > 0 && total > s.opts.RetentionBytes
		if !byAge && !bySize {
			break
		}
		total -= segs[i].Size
		boundary = next.Base
	}
	return boundary
}

// firstTimestamp returns the append time of a segment's first record: every
// record of the segment before it is older.
func (s *Store) firstTimestamp(sg segment.SegmentInfo) int64 {
	var b [recordOverhead]byte
	if err := s.msgLog.ReadAt(b[:], sg.Base); err != nil {
		return 1<<63 - 1
	}
	_, ts, _, err := parseRecordPayload(b[segment.HeaderSize:])
	if err != nil || ts == 0 {
		return 1<<63 - 1
	}
	return ts
}

// firstSeqAtOffset finds the first sequence in [lo, hi) whose record lies at
// or after off (offsets grow with sequences).
func (s *Store) firstSeqAtOffset(sj *subject, lo, hi, off int64) (int64, error) {
	var ferr error
	var b [64 * entryWidth]byte
	i := sort.Search(int(hi-lo), func(i int) bool {
		// A hole (size 0) has no offset: judge by the next real entry.
		n, err := sj.readEntries(lo+int64(i), b[:])
		if err != nil || n == 0 {
			ferr = err
			return true
		}
		for k := 0; k < n; k++ {
			if e, ok := decodeEntry(b[k*entryWidth:]); ok && e.size != 0 {
				return e.offset >= off
			}
		}
		return true
	})
	return lo + int64(i), ferr
}

// raiseMins moves each subject's first kept sequence to its first entry at
// or after the message-log offset start and deletes consume-log segments
// below it.
func (s *Store) raiseMins(start int64) error {
	for _, sj := range s.subjectList() {
		lo, visible := sj.bounds()
		newMin, err := s.firstSeqAtOffset(sj, lo, visible, start)
		if err != nil {
			return err
		}
		if newMin <= lo {
			continue
		}
		dropped := s.sumSizes(sj, lo, newMin)
		sj.mu.Lock()
		sj.min = newMin
		sj.bytes = max(0, sj.bytes-dropped)
		sj.mu.Unlock()
		if _, err := sj.log.DeleteBefore(newMin); err != nil {
			return fmt.Errorf("%w: %w", ErrIO, err)
		}
	}
	return nil
}

// sumSizes adds up the record sizes of entries [from, to).
func (s *Store) sumSizes(sj *subject, from, to int64) int64 {
	var b [1024 * entryWidth]byte
	total := int64(0)
	for from < to {
		n, err := sj.readEntries(from, b[:min(int64(len(b)), (to-from)*entryWidth)])
		if err != nil || n == 0 {
			break
		}
		for k := 0; k < n; k++ {
			if e, ok := decodeEntry(b[k*entryWidth:]); ok {
				total += int64(e.size)
			}
		}
		from += int64(n)
	}
	return total
}

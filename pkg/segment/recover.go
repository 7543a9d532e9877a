package segment

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Range is a byte range [From, To) of a log.
type Range struct{ From, To int64 }

// RecoverResult says what Recover found.
type RecoverResult struct {
	// End is where the next record will be written.
	End int64
	// Records counts the valid records handed to the callback.
	Records int64
	// TornAt is the offset of a torn tail that was cut off, or -1.
	TornAt int64
	// Corrupt lists damaged ranges in the middle of the log that were
	// skipped (only with skipCorrupt).
	Corrupt []Range
}

// RecordFunc receives one valid record. payload is only valid during the call.
type RecordFunc func(off int64, kind uint8, payload []byte) error

// Recover reads every record from from to the end of the log, validating
// each, hands the valid ones to fn, cuts off a torn tail and sets the log's
// end. It follows the rules in the package documentation: corruption in the
// middle of the log is skipped when skipCorrupt is set and is otherwise an
// error wrapping ErrCorrupt that names its offset. An error from fn stops the
// scan and is returned as is.
func (l *Log) Recover(from int64, skipCorrupt bool, fn RecordFunc) (RecoverResult, error) {
	res := RecoverResult{TornAt: -1, End: from}
	l.mu.RLock()
	segs := append([]*logSegment(nil), l.segs...)
	l.mu.RUnlock()
	if len(segs) == 0 {
		if from != 0 {
			return res, fmt.Errorf("%w: log is empty but recovery starts at %d", ErrCorrupt, from)
		}
		l.SetEnd(0)
		return res, nil
	}
	if from < segs[0].base {
		from = segs[0].base
	}
	if last := segs[len(segs)-1]; from > last.end() {
		return res, fmt.Errorf("%w: recovery starts at %d, past the log's end %d", ErrCorrupt, from, last.end())
	}
	sc := &scanner{buf: make([]byte, 8<<20), maxRecord: l.opts.MaxRecordSize}
	end := from
	for i, s := range segs {
		if s.end() <= from {
			continue
		}
		sc.reset(s)
		last := i == len(segs)-1
		rel := int64(0)
		if from > s.base {
			rel = from - s.base
		}
		for {
			if s.cap-rel < HeaderSize {
				break
			}
			h, err := sc.at(rel, HeaderSize)
			if err != nil {
				return res, err
			}
			zero := isZeroHeader(h)
			if !zero {
				if size, ok, err := sc.valid(rel); err != nil {
					return res, err
				} else if ok {
					rec, err := sc.at(rel, size)
					if err != nil {
						return res, err
					}
					if err := fn(s.base+rel, rec[3], rec[HeaderSize:size]); err != nil {
						return res, err
					}
					res.Records++
					rel += int64(size)
					end = s.base + rel
					continue
				}
			}
			// In the last segment only the window after a torn write is
			// searched; in earlier segments the writer never leaves more than
			// one record's worth of zeros, so the whole rest is searched.
			window := l.opts.ResyncWindow
			if !last {
				window = s.cap
			}
			next, err := sc.resync(rel+1, window)
			if err != nil {
				return res, err
			}
			if next < 0 && (zero || last) {
				// The normal end of a segment, or a torn tail.
				if last && !zero {
					res.TornAt = s.base + rel
				}
				break
			}
			if next < 0 {
				next = s.cap
			}
			bad := Range{From: s.base + rel, To: s.base + next}
			if !skipCorrupt {
				return res, fmt.Errorf("%w: damaged bytes [%d, %d) in the middle of the log %s", ErrCorrupt, bad.From, bad.To, l.dir)
			}
			res.Corrupt = append(res.Corrupt, bad)
			rel = next
			end = s.base + rel
		}
		if !last {
			end = s.end()
		}
	}
	// Cut whatever follows the last valid record.
	if err := l.Reset(end); err != nil {
		return res, err
	}
	res.End = end
	return res, nil
}

// scanner reads one segment through a large buffer.
type scanner struct {
	maxRecord int64
	s         *logSegment
	buf       []byte
	bstart    int64
	blen      int
}

func (sc *scanner) reset(s *logSegment) {
	sc.s = s
	sc.blen = 0
	sc.bstart = 0
}

// at returns n bytes at rel (segment-relative). Bytes past the file's size
// read as zeros. The slice is valid until the next call.
func (sc *scanner) at(rel int64, n int) ([]byte, error) {
	if rel >= sc.bstart && rel+int64(n) <= sc.bstart+int64(sc.blen) {
		o := int(rel - sc.bstart)
		return sc.buf[o : o+n], nil
	}
	size := max(len(sc.buf), n)
	if rem := sc.s.cap - rel; int64(size) > rem {
		size = int(rem)
	}
	if size < n {
		return nil, fmt.Errorf("%w: read past segment end", ErrCorrupt)
	}
	if cap(sc.buf) < size {
		sc.buf = make([]byte, size)
	}
	sc.buf = sc.buf[:cap(sc.buf)]
	k, err := sc.s.f.ReadAt(sc.buf[:size], rel)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("segment: read %s: %w", FileName(sc.s.base), err)
	}
	clear(sc.buf[k:size])
	sc.bstart, sc.blen = rel, size
	return sc.buf[:n], nil
}

// valid reports whether a valid record starts at rel and its size.
func (sc *scanner) valid(rel int64) (int, bool, error) {
	h, err := sc.at(rel, HeaderSize)
	if err != nil {
		return 0, false, err
	}
	if isZeroHeader(h) {
		return 0, false, nil
	}
	n, err := headerLen(h)
	if err != nil || rel+int64(HeaderSize+n) > sc.s.cap || int64(HeaderSize+n) > sc.maxRecord {
		return 0, false, nil
	}
	rec, err := sc.at(rel, HeaderSize+n)
	if err != nil {
		return 0, false, err
	}
	if _, _, size, err := ParseRecord(rec); err == nil {
		return size, true, nil
	}
	return 0, false, nil
}

var resyncPattern = []byte{byte(Magic >> 8), byte(Magic & 0xff), Version}

// resync returns the segment-relative offset of the first valid record in
// [from, from+window), or -1.
func (sc *scanner) resync(from, window int64) (int64, error) {
	limit := min(sc.s.cap, from+window)
	const step = 1 << 20
	for p := from; p+HeaderSize <= limit; {
		n := int(min(step, limit-p))
		chunk, err := sc.at(p, n)
		if err != nil {
			return -1, err
		}
		i := bytes.Index(chunk, resyncPattern)
		if i < 0 {
			if n < step {
				return -1, nil
			}
			p += int64(n - len(resyncPattern) + 1)
			continue
		}
		c := p + int64(i)
		if _, ok, err := sc.valid(c); err != nil {
			return -1, err
		} else if ok {
			return c, nil
		}
		p = c + 1
	}
	return -1, nil
}

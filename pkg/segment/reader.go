package segment

import "fmt"

// readChunk is how much a Reader reads at a time.
const readChunk = 1 << 20

// Reader reads a Log's records one after another from an offset, never
// past a limit its caller gives (what the writer has finished, or what is
// durable), so bytes being written are never buffered. It moves to the next
// segment at an all-zero header or when fewer than HeaderSize bytes are
// left, as Recover does. One goroutine uses a Reader; it may run beside the
// writer.
type Reader struct {
	l      *Log
	pos    int64
	buf    []byte
	bufOff int64 // offset of buf[0]
	// segBase and segEnd bound the segment last found holding pos (a
	// segment's bounds never change while it is in the log), so the log's
	// lock is taken once per segment, not per record.
	segBase, segEnd int64
}

// NewReader returns a reader positioned at from, a record's start.
func (l *Log) NewReader(from int64) *Reader { return &Reader{l: l, pos: from} }

// Pos returns the offset of the next record the reader reads.
func (r *Reader) Pos() int64 { return r.pos }

// SetPos moves the reader to pos, a record's start.
func (r *Reader) SetPos(pos int64) { r.pos = pos }

// segmentBounds returns the start and end of the segment holding off.
func (l *Log) segmentBounds(off int64) (base, end int64, ok bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if s := l.segmentFor(off); s != nil {
		return s.base, s.end(), true
	}
	return 0, 0, false
}

// Next returns the record at Pos and moves past it, when the record ends
// at or before limit. ok is false with a nil error when no whole record
// lies before limit (or no segment holds Pos); an error wrapping ErrCorrupt
// means the bytes at Pos are not a valid record. payload aliases the
// reader's buffer until the next call.
func (r *Reader) Next(limit int64) (off int64, kind uint8, payload []byte, ok bool, err error) {
	for r.pos < limit {
		if r.pos < r.segBase || r.pos >= r.segEnd {
			base, end, found := r.l.segmentBounds(r.pos)
			if !found {
				return 0, 0, nil, false, nil
			}
			r.segBase, r.segEnd = base, end
		}
		segEnd := r.segEnd
		if segEnd-r.pos < HeaderSize {
			r.pos = segEnd
			continue
		}
		avail := min(limit, segEnd) - r.pos
		if avail < HeaderSize {
			return 0, 0, nil, false, nil
		}
		h, err := r.peek(HeaderSize, avail)
		if err != nil {
			return 0, 0, nil, false, err
		}
		if isZeroHeader(h) {
			if limit < segEnd {
				// The writer leaves zeros only at a segment's end, and the
				// limit is past everything it has written.
				return 0, 0, nil, false, fmt.Errorf("%w: zero header at %d before the limit %d", ErrCorrupt, r.pos, limit)
			}
			r.pos = segEnd
			continue
		}
		n, err := headerLen(h)
		if err != nil {
			return 0, 0, nil, false, fmt.Errorf("record at %d: %w", r.pos, err)
		}
		size := int64(HeaderSize + n)
		if size > r.l.opts.MaxRecordSize || r.pos+size > segEnd {
			return 0, 0, nil, false, fmt.Errorf("%w: record at %d claims %d bytes", ErrCorrupt, r.pos, size)
		}
		if size > avail {
			return 0, 0, nil, false, nil
		}
		b, err := r.peek(int(size), avail)
		if err != nil {
			return 0, 0, nil, false, err
		}
		kind, payload, _, err := ParseRecord(b)
		if err != nil {
			return 0, 0, nil, false, fmt.Errorf("record at %d: %w", r.pos, err)
		}
		off = r.pos
		r.pos += size
		return off, kind, payload, true, nil
	}
	return 0, 0, nil, false, nil
}

// peek returns the n bytes at Pos, reading up to avail bytes ahead.
func (r *Reader) peek(n int, avail int64) ([]byte, error) {
	if r.pos >= r.bufOff && r.pos+int64(n) <= r.bufOff+int64(len(r.buf)) {
		s := r.pos - r.bufOff
		return r.buf[s : s+int64(n)], nil
	}
	want := min(max(int64(n), readChunk), avail)
	if int64(cap(r.buf)) < want {
		r.buf = make([]byte, want)
	}
	r.buf = r.buf[:want]
	if err := r.l.ReadAt(r.buf, r.pos); err != nil {
		r.buf = r.buf[:0]
		return nil, err
	}
	r.bufOff = r.pos
	return r.buf[:n], nil
}

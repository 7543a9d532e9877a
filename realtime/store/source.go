package store

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/qmq-go/qmq/pkg/segment"
)

// Source is the master's side of replication: what a slave copies is read
// through it (see "Replication" in doc.go). Store.Source returns it.
type Source struct{ s *Store }

// Source returns the store's replication source.
func (s *Store) Source() *Source { return &s.source }

// LogChunk is a run of whole records of the message log or the action log,
// byte for byte as the log holds them (see "Replication" in doc.go). A chunk
// never spans two segments.
type LogChunk struct {
	// Start is the first offset the log still keeps (retention and
	// checkpoints delete whole segments below it).
	Start int64
	// End is the log's committed end: every byte below it is durable.
	End int64
	// Offset is where Data starts: the offset asked for, or later when the
	// rest of that segment is padding (the next segment's base) or when the
	// log no longer keeps it (Start).
	Offset int64
	// Data holds whole records.
	Data []byte
}

// minChunk is the least a chunk read asks for: one record header.
const minChunk = segment.HeaderSize

// commitSignal hands out a channel that is closed when either log's
// committed end moves (CommitSignal), and records the message log's cuts
// (MessageCuts).
type commitSignal struct {
	mu   sync.Mutex
	ch   chan struct{}
	used bool

	// cutGen counts the cuts; cuts[i] is where cut i+1 went back to.
	cutGen atomic.Uint64
	cuts   []int64
}

// noteCut records that the message log is about to be cut back to off
// while it holds written bytes past it (recoverWrites): a reader of the
// written tail (ReadMessageTailInto) that overlaps the cut sees the
// generation move. It wakes the long polls.
func (s *Store) noteCut(off int64) {
	c := &s.commit
	c.mu.Lock()
	c.cuts = append(c.cuts, off)
	c.cutGen.Store(uint64(len(c.cuts)))
	c.mu.Unlock()
	s.signalCommit()
}

// MessageCuts returns the generation of the message log's cuts (how many
// there have been since Open: a failed write or fdatasync cuts the log back
// to its committed end, and bytes written past that end are replaced by
// others) and the lowest offset that the cuts after generation since went
// back to (-1: none).
func (src *Source) MessageCuts(since uint64) (gen uint64, lowest int64) {
	s := src.s
	c := &s.commit
	c.mu.Lock()
	defer c.mu.Unlock()
	lowest = -1
	for i := int(min(since, uint64(len(c.cuts)))); i < len(c.cuts); i++ {
		if lowest < 0 || c.cuts[i] < lowest {
			lowest = c.cuts[i]
		}
	}
	return uint64(len(c.cuts)), lowest
}

// MessageCutGen returns the generation of the message log's cuts.
func (src *Source) MessageCutGen() uint64 {
	s := src.s
	return s.commit.cutGen.Load()
}

// CommitSignal returns a channel closed the next time new bytes become
// committed in the message log or the action log, or are written to the
// message log under FlushSync (its written tail, ReadMessageTailInto); a
// master's sync service long-polls on it. Take the channel before reading,
// so no commit is missed.
func (src *Source) CommitSignal() <-chan struct{} {
	s := src.s
	c := &s.commit
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	c.used = true
	return c.ch
}

func (s *Store) signalCommit() {
	c := &s.commit
	c.mu.Lock()
	if c.used {
		close(c.ch)
		c.ch = make(chan struct{})
		c.used = false
	}
	c.mu.Unlock()
}

// SegmentSizes returns the message-log and action-log segment sizes; a
// master and its slave must use the same ones.
func (s *Store) SegmentSizes() (message, action int64) {
	return s.opts.SegmentSize, s.opts.ActionSegmentSize
}

// CommittedEnds returns the committed (durable) ends of the message log and
// the action log. On a slave they are the offsets to ask the master for next
// and the message-log one is its durable copy (the "slave ack").
func (s *Store) CommittedEnds() (message, action int64) {
	return s.committedMessages(), s.committedActions()
}

func (s *Store) committedMessages() int64 {
	good := s.goodEnd.Load()
	if s.opts.Flush == FlushSync {
		return good // published only after its fdatasync
	}
	return min(good, max(s.msgLog.Synced(), s.recoveredMsgEnd))
}

func (s *Store) committedActions() int64 {
	return max(s.actLog.Synced(), s.recoveredActEnd)
}

// ReadMessageLog returns up to max bytes of whole committed message-log
// records from offset from on (more when the first record is larger). An
// offset past the committed end, or one that is not the start of a record,
// fails with an error wrapping ErrBadOffset.
func (src *Source) ReadMessageLog(from int64, max int) (LogChunk, error) {
	s := src.s
	return readChunk(s.msgLog, s.committedMessages(), from, max, nil)
}

// ReadMessageTailInto is ReadMessageLogInto up to the message log's
// written end instead of its committed end: the records past the committed
// end (the chunk's End, loaded after the read) are written but not yet
// durable, and a failed write or fdatasync may cut them (MessageCuts). The
// chunk is what the log held only when MessageCutGen returns the same
// generation before and after the call (a read that overlaps a cut may
// mix old and new bytes, or fail). Records past End are whole: the
// appender publishes the end of a written group only.
func (src *Source) ReadMessageTailInto(buf []byte, from int64, max int) (LogChunk, error) {
	s := src.s
	c, err := readChunk(s.msgLog, s.msgLog.End(), from, max, buf)
	c.End = s.committedMessages()
	return c, err
}

// RecoveredMessageEnd returns where Open found the message log ending: the
// end of what this run did not write.
func (src *Source) RecoveredMessageEnd() int64 {
	s := src.s
	return s.recoveredMsgEnd
}

// MessageTailEnd returns the message log's written end (ReadMessageTailInto
// reads up to it).
func (src *Source) MessageTailEnd() int64 {
	s := src.s
	return s.msgLog.End()
}

// ReadActionLog is ReadMessageLog for the action log.
func (src *Source) ReadActionLog(from int64, max int) (LogChunk, error) {
	s := src.s
	return readChunk(s.actLog, s.committedActions(), from, max, nil)
}

// ReadMessageLogInto and ReadActionLogInto read into buf when it is large
// enough (Data then aliases it), so a caller can reuse its buffers.
func (src *Source) ReadMessageLogInto(buf []byte, from int64, max int) (LogChunk, error) {
	s := src.s
	return readChunk(s.msgLog, s.committedMessages(), from, max, buf)
}

// ReadActionLogInto: see ReadMessageLogInto.
func (src *Source) ReadActionLogInto(buf []byte, from int64, max int) (LogChunk, error) {
	s := src.s
	return readChunk(s.actLog, s.committedActions(), from, max, buf)
}

func readChunk(l *segment.Log, committed, from int64, maxBytes int, scratch []byte) (LogChunk, error) {
	c := LogChunk{Start: l.Start(), End: committed, Offset: from}
	switch {
	case from < 0:
		return c, fmt.Errorf("%w: negative offset %d", ErrBadOffset, from)
	case from > committed:
		return c, fmt.Errorf("%w: offset %d is past the committed end %d", ErrBadOffset, from, committed)
	}
	if from < c.Start {
		from = c.Start
	}
	maxBytes = max(maxBytes, minChunk)
	for from < committed {
		c.Offset = from
		segEnd := segmentEnd(l, from)
		if segEnd < 0 {
			return c, fmt.Errorf("%w: no segment holds offset %d", ErrBadOffset, from)
		}
		limit := min(committed, segEnd)
		if limit-from < segment.HeaderSize {
			from = segEnd // the padding at a segment's end
			continue
		}
		want := min(limit-from, int64(maxBytes))
		buf := scratch
		if int64(cap(buf)) >= want {
			buf = buf[:want]
		} else {
			buf = make([]byte, want)
		}
		if err := l.ReadAt(buf, from); err != nil {
			return c, fmt.Errorf("%w: read at %d: %w", ErrIO, from, err)
		}
		if isZero(buf[:segment.HeaderSize]) {
			from = segEnd
			continue
		}
		size, err := recordSize(buf)
		if err != nil || size > limit-from {
			return c, fmt.Errorf("%w: no record starts at offset %d", ErrBadOffset, from)
		}
		if size > int64(len(buf)) {
			buf = make([]byte, size)
			if err := l.ReadAt(buf, from); err != nil {
				return c, fmt.Errorf("%w: read at %d: %w", ErrIO, from, err)
			}
		}
		// The first record's CRC proves the offset is a record boundary;
		// after it only headers are read (the slave checks every CRC before
		// it writes, so the master does not pay for a second pass).
		_, _, n, err := segment.ParseRecord(buf)
		if err != nil {
			return c, fmt.Errorf("%w: no valid record at offset %d: %w", ErrBadOffset, from, err)
		}
		for n+segment.HeaderSize <= len(buf) && !isZero(buf[n:n+segment.HeaderSize]) {
			k, err := recordSize(buf[n:])
			if err != nil || int64(n)+k > int64(len(buf)) {
				break // a record cut by maxBytes (or damage: the next call reports it)
			}
			n += int(k)
		}
		c.Data = buf[:n]
		return c, nil
	}
	c.Offset = from
	return c, nil
}

// segmentEnd returns the end of the segment holding off, or -1.
func segmentEnd(l *segment.Log, off int64) int64 {
	for _, sg := range l.Segments() {
		if off >= sg.Base && off < sg.Base+sg.Size {
			return sg.Base + sg.Size
		}
	}
	return -1
}

// recordSize reads a record header's total size without checking the CRC.
func recordSize(h []byte) (int64, error) {
	if len(h) < segment.HeaderSize || binary.BigEndian.Uint16(h) != segment.Magic || h[2] != segment.Version || h[3] == 0 {
		return 0, ErrBadOffset
	}
	return segment.RecordSize(int(binary.BigEndian.Uint32(h[4:]))), nil
}

// splitRecord returns the kind, payload and size of a record already
// validated (no CRC check).
func splitRecord(b []byte) (kind uint8, payload []byte, size int) {
	n := int(binary.BigEndian.Uint32(b[4:]))
	return b[3], b[segment.HeaderSize : segment.HeaderSize+n], segment.HeaderSize + n
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

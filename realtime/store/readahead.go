package store

import (
	"sync"
	"sync/atomic"
)

// readAheadEntries is how many consume-log entries a group reads at once
// while it drains a backlog (20 KiB).
const readAheadEntries = 512

// readAhead holds consume-log entries of a group read ahead of its cursor,
// so that the pulls of a group draining a backlog (64 messages each, say)
// share one read of readAheadEntries entries instead of reading their own.
// Entries below a subject's visible sequence never change while the store
// is open (appends that fail are rolled back above it; retention only
// deletes below the minimum, which takeNew checks before reading), so the
// copy stays right. The buffer is kept only while the group is behind: a
// read that reaches the visible end gives it up, so a caught-up group holds
// no memory for it. Guarded by the group's mutex.
//
// Reads are made into the pull's scratch buffer (pullScratch.entries, pooled
// with the scratch) and the group takes that buffer over only when it turns
// out to be behind; a buffer given up goes back to the scratch. A caught-up
// group pulls a few entries at a time, and allocating (and dropping) a
// buffer for each of those reads was most of what a broker allocated at a
// steady 20,000 msg/s (20 KiB a pull, ~20 MB/s of garbage).
type readAhead struct {
	from int64  // sequence of buf's first entry
	buf  []byte // whole entries
}

// entries returns the raw entries from seq on, at least one and at most
// want when any is visible: from the buffer when it holds seq, otherwise
// by reading up to readAheadEntries (never past the visible end). The
// result is valid until the next call and until sc is put back.
func (ra *readAhead) entries(sj *subject, seq int64, want int, sc *pullScratch) ([]byte, error) {
	if seq >= ra.from && seq < ra.from+int64(len(ra.buf)/entryWidth) {
		b := ra.buf[(seq-ra.from)*entryWidth:]
		return b[:min(len(b), want*entryWidth)], nil
	}
	n := max(want, readAheadEntries)
	buf, lent := ra.buf, false
	if cap(buf) < n*entryWidth {
		buf, lent = sc.entriesFor(n), true
	}
	ra.buf = nil
	got, err := sj.readEntries(seq, buf[:n*entryWidth])
	if err != nil || got == 0 {
		if !lent {
			sc.giveEntries(buf)
		}
		return nil, err
	}
	out := buf[:min(got, want)*entryWidth]
	if got < n {
		// Caught up with the visible end: nothing to keep for later pulls.
		// out stays valid: the scratch is put back only after the Pull.
		if !lent {
			sc.giveEntries(buf)
		}
		return out, nil
	}
	if lent {
		sc.entries = nil // the group keeps it now
	}
	ra.from, ra.buf = seq, buf[:got*entryWidth]
	return out, nil
}

// messageReadAheadBytes is how much of the message log a group reads at
// once while it drains a backlog.
const messageReadAheadBytes = 256 << 10

// messageReadAhead holds message-log bytes read ahead for a group, so the
// pulls of a group draining a backlog share one read of
// messageReadAheadBytes instead of one read each. A pull whose records are
// sparse in the log (under a quarter of the range they span, as for a
// subject that is a small part of the traffic) reads them directly instead.
// Only published bytes (below the store's goodEnd) are read ahead: they
// never change while the store is open (failed writes are cut back to
// goodEnd; a replica, whose log may restart, serves no pulls). A read that
// would reach past goodEnd reads only what it needs and drops the buffer,
// and a pull that leaves its group with nothing more to take drops it too
// (Pull), so a caught-up group holds no memory for it: a group of a quiet
// subject, whose few messages sit far from the log's end, kept 256 KiB
// each before (TestScale: ~180 KiB a consumer instead of ~900 B). Its own lock: pulls read
// messages outside the group's.
//
// Pulls take their messages from the buffer without copying them
// (viewMessages): the buffer is an aheadChunk that every pull holding a
// view into it references until its result is released, and a read ahead
// never overwrites a referenced chunk; it takes another from the pool. Before,
// each pull copied its messages out of the buffer, a copy of every
// delivered byte (~3% of the broker's CPU on the fairness rig) on top of
// the one into the reply.
type messageReadAhead struct {
	mu    sync.Mutex
	from  int64       // message-log offset of chunk.buf[0]
	n     int         // published bytes in chunk.buf from there
	chunk *aheadChunk // nil when nothing is read ahead; holds one reference
}

// aheadChunk is a read-ahead buffer with a count of its holders: the
// read-ahead that filled it and the pull results that view it. The last
// holder to let go puts it back in aheadChunks.
type aheadChunk struct {
	buf  []byte
	refs atomic.Int32
}

var aheadChunks = sync.Pool{New: func() any { return &aheadChunk{buf: make([]byte, messageReadAheadBytes)} }}

// release drops one reference.
func (c *aheadChunk) release() {
	if c.refs.Add(-1) == 0 {
		aheadChunks.Put(c)
	}
}

// drop lets go of the read-ahead's chunk. ra.mu is held.
func (ra *messageReadAhead) drop() {
	if ra.chunk != nil {
		ra.chunk.release()
		ra.chunk, ra.n = nil, 0
	}
}

// release lets go of the read-ahead's chunk (the group caught up).
func (ra *messageReadAhead) release() {
	ra.mu.Lock()
	ra.drop()
	ra.mu.Unlock()
}

// buffered reports how many bytes ra holds read ahead (tests).
func (ra *messageReadAhead) buffered() int {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	return ra.n
}

// viewMessages returns the n message-log bytes at off as a view into the
// read-ahead buffer, reading ahead when the buffer does not hold them, and
// the chunk the view is in, which the caller must release once done with
// the view. It returns a nil chunk (and no error) when the bytes should be
// read directly instead: they reach past the published end, or they are
// too many to share a read ahead.
func (s *Store) viewMessages(ra *messageReadAhead, n int, off int64) ([]byte, *aheadChunk, error) {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	if ra.chunk != nil && off >= ra.from && off+int64(n) <= ra.from+int64(ra.n) {
		ra.chunk.refs.Add(1)
		at := int(off - ra.from)
		return ra.chunk.buf[at : at+n : at+n], ra.chunk, nil
	}
	if off+messageReadAheadBytes > s.goodEnd.Load() || n >= messageReadAheadBytes/2 {
		ra.drop()
		return nil, nil, nil
	}
	if ra.chunk == nil || ra.chunk.refs.Load() > 1 {
		// Pulls still hold views into the current chunk: take another.
		ra.drop()
		ra.chunk = aheadChunks.Get().(*aheadChunk)
		ra.chunk.refs.Store(1)
	}
	if err := s.msgLog.ReadAt(ra.chunk.buf, off); err != nil {
		ra.drop()
		return nil, nil, nil // the direct read says what the pull's bytes lack
	}
	ra.from, ra.n = off, len(ra.chunk.buf)
	ra.chunk.refs.Add(1)
	return ra.chunk.buf[:n:n], ra.chunk, nil
}

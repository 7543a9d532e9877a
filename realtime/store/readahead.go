package store

import "sync"

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
// subject that is a small part of the traffic) reads them directly instead. Only published bytes
// (below the store's goodEnd) are read ahead: they never change while the
// store is open (failed writes are cut back to goodEnd; a replica, whose log
// may restart, serves no pulls). A read that would reach past goodEnd reads
// only what it needs and drops the buffer, so a caught-up group holds no
// memory for it. Its own lock: pulls read messages outside the group's.
type messageReadAhead struct {
	mu   sync.Mutex
	from int64  // message-log offset of buf[0]
	buf  []byte // published bytes from there
}

// readMessages fills p with the message-log bytes at off, through ra when
// it is not nil.
func (s *Store) readMessages(ra *messageReadAhead, p []byte, off int64) error {
	if ra == nil {
		return s.msgLog.ReadAt(p, off)
	}
	ra.mu.Lock()
	defer ra.mu.Unlock()
	if off >= ra.from && off+int64(len(p)) <= ra.from+int64(len(ra.buf)) {
		copy(p, ra.buf[off-ra.from:])
		return nil
	}
	if off+messageReadAheadBytes > s.goodEnd.Load() || len(p) >= messageReadAheadBytes/2 {
		ra.buf = nil
		return s.msgLog.ReadAt(p, off)
	}
	if ra.buf == nil {
		ra.buf = make([]byte, messageReadAheadBytes)
	}
	ra.buf = ra.buf[:messageReadAheadBytes]
	if err := s.msgLog.ReadAt(ra.buf, off); err != nil {
		ra.buf = nil
		return s.msgLog.ReadAt(p, off) // say what p itself lacks
	}
	ra.from = off
	copy(p, ra.buf)
	return nil
}

package store

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
// read that reaches the visible end drops it, so a caught-up group holds
// no memory for it. Guarded by the group's mutex.
type readAhead struct {
	from int64  // sequence of buf's first entry
	buf  []byte // whole entries
}

// entries returns the raw entries from seq on, at least one and at most
// want when any is visible: from the buffer when it holds seq, otherwise
// by reading up to readAheadEntries (never past the visible end). The
// result is valid until the next call.
func (ra *readAhead) entries(sj *subject, seq int64, want int) ([]byte, error) {
	if seq >= ra.from && seq < ra.from+int64(len(ra.buf)/entryWidth) {
		b := ra.buf[(seq-ra.from)*entryWidth:]
		return b[:min(len(b), want*entryWidth)], nil
	}
	n := max(want, readAheadEntries)
	if cap(ra.buf) < n*entryWidth {
		ra.buf = make([]byte, n*entryWidth)
	}
	got, err := sj.readEntries(seq, ra.buf[:n*entryWidth])
	if err != nil || got == 0 {
		ra.buf = nil
		return nil, err
	}
	out := ra.buf[:min(got, want)*entryWidth]
	if got < n {
		// Caught up with the visible end: nothing to keep for later pulls.
		// out stays valid: nothing else uses the old buffer.
		ra.buf = nil
		return out, nil
	}
	ra.from, ra.buf = seq, ra.buf[:got*entryWidth]
	return out, nil
}

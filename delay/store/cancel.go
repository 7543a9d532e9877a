package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// Cancel and the fire rule (see "Cancel" in the package documentation).
//
// Whether a pending message fires or is cancelled is decided under Store.mu
// by two facts only: fireMark, the latest due time of an entry the fire
// loop has taken from the wheel (set to the clock at Open: whatever an
// earlier run or the master this copy came from fired was due before), and
// the cancelled set. The fire loop skips an entry in the set and raises
// fireMark to the due time of every entry it keeps; Cancel answers
// "already fired" for a message due at or before fireMark and otherwise
// puts it into the set. So a cancelled message is never handed out in this
// run, and a message answered "already fired" is never skipped. The set is
// made durable by a cancel record in the message log before "cancelled" is
// answered; the replay turns the record into a cancel entry of the hour's
// dispatch log, which later runs, and a slave's copy, load as dispatched.

// cancelled records cancelled messages by hour and offset, with what has
// become of each. Guarded by mu.
type cancelSet map[int64]map[int64]cancelState

type cancelState uint8

const (
	cancelSkipped cancelState = 1 << iota // the fire loop met the entry and dropped it
	cancelCounted                         // the replay counted its cancel entry as dispatched
)

func (c cancelSet) has(h, off int64) bool {
	_, ok := c[h][off]
	return ok
}

func (c cancelSet) add(h, off int64) {
	m := c[h]
	if m == nil {
		m = map[int64]cancelState{}
		c[h] = m
	}
	if _, ok := m[off]; !ok {
		m[off] = 0
	}
}

// mark adds flags to a cancelled entry and reports whether it had them all.
func (c cancelSet) mark(h, off int64, f cancelState) bool {
	c.add(h, off)
	old := c[h][off]
	c[h][off] = old | f
	return old&f == f
}

// Cancel cancels the messages named by targets, each by (subject, schedule
// key) or (subject, message id), and calls done with one Result per target,
// in order, on a store goroutine: Err nil means cancelled (it will never be
// handed out through Due, also after a crash; under FlushSync the cancel
// record is fdatasynced before done), protocol.ErrAlreadyFired that it has
// been or will be handed out, protocol.ErrNotFound that no such message is
// stored (a message appended concurrently with Cancel may or may not be
// seen), protocol.ErrInvalid a bad target, or another error (the message
// may or may not be cancelled). A message stored twice under one id is
// cancelled in every copy not yet fired.
func (s *Store) Cancel(targets []protocol.ScheduleTarget, done func([]Result)) {
	go s.control(targets, nil, done)
}

// Reschedule moves the messages named by targets to new due times (Unix
// ms, dues[i] for targets[i]) atomically: one message-log record cancels
// the stored message and stores it again (same id, same bytes but the due
// time), so it comes out at the new time and never at the old one, also
// after a crash. Answers as Cancel's: nil (rescheduled), ErrAlreadyFired,
// ErrNotFound, ErrInvalid (a due time not after now), ErrBeyondHorizon.
func (s *Store) Reschedule(targets []protocol.ScheduleTarget, dues []int64, done func([]Result)) {
	go s.control(targets, dues, done)
}

// RescheduleWait is Reschedule that waits for the results.
func (s *Store) RescheduleWait(targets []protocol.ScheduleTarget, dues []int64) []Result {
	ch := make(chan []Result, 1)
	s.Reschedule(targets, dues, func(r []Result) { ch <- r })
	return <-ch
}

// CancelWait is Cancel that waits for the results.
func (s *Store) CancelWait(targets []protocol.ScheduleTarget) []Result {
	ch := make(chan []Result, 1)
	s.Cancel(targets, func(r []Result) { ch <- r })
	return <-ch
}

// cancelWaitReplay bounds how long Cancel waits for the replay.
const cancelWaitReplay = 10 * time.Second

type cancelHit struct {
	target int
	h, off int64
	due    int64
	size   int
	msg    []byte // the stored message (for a reschedule)
	// A reschedule of a keyed message reserves its key until the replay
	// indexes the new record; key and old are what to put back on failure.
	key    uint64
	hasKey bool
	old    keyRef
}

// control cancels (dues nil) or reschedules targets.
func (s *Store) control(targets []protocol.ScheduleTarget, dues []int64, done func([]Result)) {
	results := make([]Result, len(targets))
	if dues != nil && len(dues) != len(targets) {
		for i := range results {
			results[i].Err = protocol.Errorf(protocol.StatusBadRequest, fmt.Sprintf("%d due times for %d targets", len(dues), len(targets)))
		}
		done(results)
		return
	}
	// Every message acknowledged before the call is indexed once the replay
	// has passed the log's durable end.
	if err := s.awaitReplay(s.replayLimit()); err != nil {
		for i := range results {
			results[i].Err = err
		}
		done(results)
		return
	}
	var hits []cancelHit
	for i, t := range targets {
		if err := s.opts.Limits.CheckScheduleTarget(t); err != nil {
			results[i].Err = err
			continue
		}
		if dues != nil {
			if err := s.checkNewDue(dues[i]); err != nil {
				results[i].Err = err
				continue
			}
		}
		found, busy := s.lookup(i, t)
		if busy {
			// A message with the key is being appended (a recurring
			// schedule's next template, a concurrent send): its answer
			// comes in a moment.
			results[i].Err = protocol.Errorf(protocol.StatusRetryLater, fmt.Sprintf("a message %s of subject %q is being stored; try again", describe(t), t.Subject))
			continue
		}
		if len(found) == 0 {
			results[i].Err = protocol.Errorf(protocol.StatusNotFound, fmt.Sprintf("no scheduled message %s of subject %q", describe(t), t.Subject))
			continue
		}
		hits = append(hits, found...)
	}
	// The decision (see the top of this file).
	fired := make([]bool, len(targets))
	var records [][]byte
	var recHits []cancelHit
	gone := make([]bool, len(targets)) // cancelled or rescheduled before
	s.idx.mu.Lock()                    // a rescheduled key stays taken (reserveKey)
	s.mu.Lock()
	for _, c := range hits {
		switch {
		case dues == nil && s.cancelled.has(c.h, c.off):
			// Cancelled before: written again, so the answer waits until it
			// is durable (the first cancel's record may still be on its way).
			records = append(records, appendControl(make([]byte, 0, controlSize), controlCancel, c.h, c.off))
			recHits = append(recHits, c)
		case s.cancelled.has(c.h, c.off):
			gone[c.target] = true // rescheduled (or cancelled): the new record is another hit
		case c.due <= s.fireMark:
			fired[c.target] = true
		case dues == nil:
			s.cancelled.add(c.h, c.off)
			records = append(records, appendControl(make([]byte, 0, controlSize), controlCancel, c.h, c.off))
			recHits = append(recHits, c)
		default:
			s.cancelled.add(c.h, c.off)
			rec := appendControl(make([]byte, 0, controlSize+len(c.msg)), controlReschedule, c.h, c.off)
			at := len(rec)
			rec = append(rec, c.msg...)
			binary.BigEndian.PutUint64(rec[at+16:], uint64(dues[c.target]))
			binary.BigEndian.PutUint32(rec[at:], protocol.Checksum(rec[at+4:]))
			if c.hasKey {
				c.old = s.idx.byKey[c.key]
				s.idx.byKey[c.key] = keyRef{loc: reservedLoc, id: c.old.id, due: reservedStored}
			}
			records = append(records, rec)
			recHits = append(recHits, c)
		}
	}
	s.mu.Unlock()
	s.idx.mu.Unlock()
	for i := range targets {
		if gone[i] && !fired[i] && results[i].Err == nil && !hasRecord(recHits, i) {
			results[i].Err = protocol.Errorf(protocol.StatusNotFound, fmt.Sprintf("scheduled message %s of subject %q was cancelled or rescheduled", describe(targets[i]), targets[i].Subject))
		}
	}
	for i, f := range fired {
		if f {
			results[i].Err = protocol.Errorf(protocol.StatusAlreadyFired, fmt.Sprintf("scheduled message %s of subject %q has been or will be forwarded", describe(targets[i]), targets[i].Subject))
		}
	}
	if len(records) == 0 {
		done(results)
		return
	}
	req := &appendReq{results: make([]Result, len(records))}
	for i, r := range records {
		req.msgs = append(req.msgs, r)
		req.index = append(req.index, i)
		req.bytes += len(r)
	}
	req.done = func(rs []Result) {
		var undo []cancelHit
		for i, r := range rs {
			c := recHits[i]
			if r.Err != nil {
				undo = append(undo, c)
				if !fired[c.target] {
					results[c.target].Err = r.Err
				}
			}
		}
		if len(undo) > 0 {
			s.undoCancel(undo)
		}
		if dues != nil {
			s.settleReschedules(recHits, rs)
		}
		done(results)
	}
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		req.complete(protocol.Errorf(protocol.StatusShuttingDown, "delay store is closed"))
		return
	}
	s.appendCh <- req
	s.closeMu.RUnlock()
}

// undoCancel takes back cancels whose record could not be written: the
// messages fire as if never cancelled (one the fire loop already skipped
// goes back into the wheel, due now).
func (s *Store) undoCancel(hits []cancelHit) {
	now := s.clock.Now().UnixMilli()
	s.mu.Lock()
	for _, c := range hits {
		m := s.cancelled[c.h]
		state, ok := m[c.off]
		if !ok {
			continue
		}
		delete(m, c.off)
		if state&cancelSkipped != 0 {
			s.wheel.Add(now, newEntry(c.h, c.off, c.size))
		}
	}
	s.mu.Unlock()
	signal(s.fireWake)
}

func describe(t protocol.ScheduleTarget) string {
	if t.ByID {
		return fmt.Sprintf("with id %q", t.Key)
	}
	return fmt.Sprintf("with key %q", t.Key)
}

// lookup finds the stored messages a target names, checking each candidate
// record's names.
// busy says the key is reserved by an append not yet indexed.
func (s *Store) lookup(i int, t protocol.ScheduleTarget) (hits []cancelHit, busy bool) {
	var locs []uint64
	if t.ByID {
		locs = s.idx.idLocs(s.idx.idHash([]byte(t.Key)))
	} else {
		s.idx.mu.Lock()
		if r, ok := s.idx.byKey[s.idx.keyHash([]byte(t.Subject), []byte(t.Key))]; ok {
			if r.loc == reservedLoc {
				busy = true
			} else {
				locs = []uint64{r.loc}
			}
		}
		s.idx.mu.Unlock()
	}
	var out []cancelHit
	for _, l := range locs {
		h, off := unpackLoc(l)
		msg, err := s.readRecord(h, off)
		if err != nil {
			continue // removed by retention meanwhile, or unreadable
		}
		v, err := protocol.ParseMessageNoCRC(msg)
		if err != nil || t.Subject != "" && string(v.Subject) != t.Subject {
			continue
		}
		if t.ByID && string(v.ID) != t.Key || !t.ByID && !hasKey(&v, t.Key) {
			continue
		}
		c := cancelHit{target: i, h: h, off: off, due: dueOf(msg), size: len(msg), msg: msg}
		if key, ok := scheduleKey(&v); ok {
			c.key, c.hasKey = s.idx.keyHash(v.Subject, key), true
		}
		out = append(out, c)
	}
	return out, busy
}

// readRecord reads and checks the schedule record at off of hour h and
// returns its message. One read of recordGuess bytes takes most records
// whole (a cancel batch reads one record a target); a longer one takes a
// second read.
func (s *Store) readRecord(h, off int64) ([]byte, error) {
	cf, err := s.schedules.acquire(h, false)
	if err != nil {
		return nil, err
	}
	defer s.schedules.release(cf)
	b := make([]byte, recordGuess)
	got, err := cf.File.ReadAt(b, off)
	if got < scheduleHeaderSize {
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("%w: schedule record at %d: %d bytes", errTorn, off, got)
		}
		return nil, err
	}
	n := int64(binary.BigEndian.Uint32(b))
	if n > maxRecordSize {
		return nil, fmt.Errorf("%w: schedule record of %d bytes", errTorn, n)
	}
	if need := scheduleHeaderSize + int(n); need <= got {
		b = b[:need:need]
	} else {
		b = make([]byte, need)
		if _, err := cf.File.ReadAt(b, off); err != nil {
			return nil, err
		}
	}
	return checkScheduleRecord(b)
}

// recordGuess is readRecord's first read.
const recordGuess = 512

// awaitReplay waits until the index holds what was found at Open and the
// replay has passed pos.
func (s *Store) awaitReplay(pos int64) error {
	deadline := time.Now().Add(cancelWaitReplay)
	select {
	case <-s.indexReady:
	case <-s.quit:
		return protocol.Errorf(protocol.StatusShuttingDown, "delay store is closed")
	case <-time.After(cancelWaitReplay):
		return protocol.Errorf(protocol.StatusRetryLater, "the delay store is still indexing its hour files; try again")
	}
	for s.replayedPos.Load() < pos {
		if time.Now().After(deadline) {
			return protocol.Errorf(protocol.StatusRetryLater, "the delay store's replay is behind; try again")
		}
		signal(s.indexWake)
		select {
		case <-s.quit:
			return protocol.Errorf(protocol.StatusShuttingDown, "delay store is closed")
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// reserveKey applies the key rule to a message being appended: a key whose
// message is pending (or being appended) refuses it with
// protocol.ErrKeyExists — protocol.ErrDuplicate when it is the same message
// (same id) again. Otherwise the key is reserved until the replay indexes
// the message; settle is called with the append's outcome: a failed append
// frees the key, a stored one makes a resend of it a duplicate.
//
// With replace (protocol.PropScheduleReplace) a pending, stored message
// with the key is cancelled instead (the fire rule decides as for Cancel)
// and replaced is its location: Append then writes the message as a
// reschedule record naming it, so the old message goes and the new one
// comes in one record; settle(false) takes the cancel back.
func (s *Store) reserveKey(v *protocol.View, key []byte, replace bool) (settle func(stored bool), replaced uint64, err error) {
	if len(key) > protocol.MaxScheduleKeyLen {
		return nil, 0, protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("schedule key of %d bytes, longest %d", len(key), protocol.MaxScheduleKeyLen))
	}
	if len(key) == 0 {
		return nil, 0, protocol.Errorf(protocol.StatusInvalid, "empty schedule key")
	}
	select {
	case <-s.indexReady:
	default:
		return nil, 0, protocol.Errorf(protocol.StatusRetryLater, "the delay store is still indexing its hour files; try again")
	}
	x := s.idx
	kh := x.keyHash(v.Subject, key)
	idh := x.idHash(v.ID)
	x.mu.Lock()
	defer x.mu.Unlock()
	replaced = reservedLoc
	var old keyRef
	if r, ok := x.byKey[kh]; ok {
		pending := r.loc == reservedLoc
		if !pending {
			h, off := unpackLoc(r.loc)
			s.mu.Lock()
			pending = !s.cancelled.has(h, off) && r.due > s.fireMark
			if pending && replace && r.id != idh {
				s.cancelled.add(h, off) // decided here, under mu, as Cancel decides
				pending, replaced, old = false, r.loc, r
			}
			s.mu.Unlock()
		}
		switch {
		case pending && r.id == idh && r.loc == reservedLoc && r.due != reservedStored:
			return nil, 0, protocol.Errorf(protocol.StatusRetryLater, fmt.Sprintf("message %q is being stored", v.ID))
		case pending && r.id == idh:
			return nil, 0, protocol.Errorf(protocol.StatusDuplicate, fmt.Sprintf("message %q is stored", v.ID))
		case pending && replace:
			// Stored a moment ago and not yet indexed: it has no location
			// to name yet (the replay is milliseconds behind).
			return nil, 0, protocol.Errorf(protocol.StatusRetryLater, fmt.Sprintf("the message with schedule key %q is being stored; try again", key))
		case pending:
			return nil, 0, protocol.Errorf(protocol.StatusKeyExists, fmt.Sprintf("subject %q has a pending message with schedule key %q", v.Subject, key))
		}
	}
	x.byKey[kh] = keyRef{loc: reservedLoc, id: idh}
	return func(stored bool) {
		x.mu.Lock()
		if r, ok := x.byKey[kh]; ok && r.loc == reservedLoc && r.id == idh {
			switch {
			case stored:
				r.due = reservedStored
				x.byKey[kh] = r
			case replaced != reservedLoc:
				x.byKey[kh] = old
			default:
				delete(x.byKey, kh)
			}
		}
		x.mu.Unlock()
		if !stored && replaced != reservedLoc {
			h, off := unpackLoc(replaced)
			size := 0
			if msg, err := s.readRecord(h, off); err == nil {
				size = len(msg)
			}
			s.undoCancel([]cancelHit{{h: h, off: off, size: size}})
		}
	}, replaced, nil
}

func hasKey(v *protocol.View, key string) bool {
	k, ok := scheduleKey(v)
	return ok && string(k) == key
}

func hasRecord(hits []cancelHit, target int) bool {
	for _, c := range hits {
		if c.target == target {
			return true
		}
	}
	return false
}

// checkNewDue checks a reschedule's due time: after now, within the
// horizon.
func (s *Store) checkNewDue(due int64) error {
	now := s.clock.Now().UnixMilli()
	if due <= now {
		return protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("cannot reschedule to %s: not after now (%s)",
			time.UnixMilli(due).UTC().Format(time.RFC3339Nano), time.UnixMilli(now).UTC().Format(time.RFC3339Nano)))
	}
	if latest := now + s.opts.Horizon.Milliseconds(); due > latest {
		return protocol.Errorf(protocol.StatusBeyondHorizon, fmt.Sprintf("cannot reschedule to %s, beyond the delay horizon of %s (latest %s)",
			time.UnixMilli(due).UTC().Format(time.RFC3339), humanDuration(s.opts.Horizon), time.UnixMilli(latest).UTC().Format(time.RFC3339)))
	}
	return nil
}

// settleReschedules puts back the key entries of reschedules whose record
// could not be written, and marks the others' reservations stored (the
// replay replaces them with the new record's location).
func (s *Store) settleReschedules(hits []cancelHit, rs []Result) {
	s.idx.mu.Lock()
	defer s.idx.mu.Unlock()
	for i, c := range hits {
		if !c.hasKey {
			continue
		}
		if r, ok := s.idx.byKey[c.key]; ok && r.loc == reservedLoc && rs[i].Err != nil {
			s.idx.byKey[c.key] = c.old
		}
	}
}

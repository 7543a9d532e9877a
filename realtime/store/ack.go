package store

import (
	"fmt"

	"github.com/qmq-go/qmq/pkg/protocol"
	"sort"
	"time"
)

// AckRequest acks pull sequences First..Last (inclusive) of one consumer.
type AckRequest struct {
	Subject  string
	Group    string
	Consumer string
	First    int64
	Last     int64
	// Broadcast acks for a broadcast subscriber (Group is ignored).
	Broadcast bool
	// At is when the ack arrived, the consumer's last-seen time (zero:
	// the store's Clock). A server passes the time it read the request,
	// which it has already: reading the clock cost a tenth of the broker's
	// CPU under per-message acks.
	At time.Time
}

// seenAt returns when req's consumer was seen: req.At, else now.
func (s *Store) seenAt(req *AckRequest) time.Time {
	if !req.At.IsZero() {
		return req.At
	}
	return s.opts.Clock()
}

// AckResult says what an ack did.
type AckResult struct {
	// Gap holds the messages of un-acked pull sequences below First (a lost
	// ack): they are acked too, and the caller should send them to the
	// group's retry subject. Entries whose messages are gone are left out.
	Gap []Pulled
	// Returned counts the entries of a gap over maxGapRetry pull sequences:
	// they went back to the group, as a dead consumer's do, instead of into
	// Gap (which would hold that many messages in memory at once).
	Returned int
	// Acked is the consumer's acked position after the ack.
	Acked int64
}

// Ack records that a consumer processed pull sequences First..Last. Acks at
// or below the acked position are duplicates and change nothing; acks above
// a gap report the gap (see AckResult.Gap) and ack through Last.
func (s *Store) Ack(req AckRequest) (AckResult, error) {
	if err := s.errIfReplica(); err != nil {
		return AckResult{}, err
	}
	if req.First < 0 || req.Last < req.First {
		return AckResult{}, fmt.Errorf("%w: ack range %d..%d", ErrInvalidRequest, req.First, req.Last)
	}
	if s.isClosed() {
		return AckResult{}, ErrClosed
	}
	key := groupKey{subject: req.Subject, group: req.Group}
	if req.Broadcast {
		key = groupKey{subject: req.Subject, group: req.Consumer, broadcast: true}
	}
	g, _, err := s.groupFor(key, false, false)
	if err != nil {
		return AckResult{}, err
	}
	if g == nil {
		return AckResult{}, fmt.Errorf("%w: %s/%s", ErrUnknownGroup, req.Subject, req.Group)
	}
	if err := protocol.CheckConsumerID(req.Consumer); err != nil {
		return AckResult{}, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	g.mu.Lock()
	// A consumer the store does not know acks pull seqs whose actions were
	// lost in a crash: create it so they are voided below.
	c, err := s.consumerFor(g, req.Consumer)
	if err != nil {
		g.mu.Unlock()
		return AckResult{}, err
	}
	c.seen = s.seenAt(&req)
	ds, returned, err := s.ackLocked(g, c, req)
	res := AckResult{Acked: c.acked, Returned: returned}
	g.mu.Unlock()
	if err != nil {
		return res, err
	}
	res.Gap, _ = s.readDeliveries(g.subj, ds, nil)
	s.stats.acked.Add(1)
	return res, nil
}

// TryAck is Ack for the common case, made without waiting, so an event
// loop may call it: it applies req only when that takes no I/O and no lock
// someone holds — the groups' table and the group's lock free, the
// consumer known, no gap below First and no pull sequence up to Last that
// the store does not know. ok false means it changed nothing: call Ack,
// which also reports what is wrong with req. acked is the consumer's acked
// position after the ack.
func (s *Store) TryAck(req AckRequest) (acked int64, ok bool) {
	if req.Broadcast || req.First < 0 || req.Last < req.First || s.replica.Load() || s.isClosed() {
		return 0, false
	}
	if !s.groupsMu.TryRLock() {
		return 0, false
	}
	g := s.groups[groupKey{subject: req.Subject, group: req.Group}]
	s.groupsMu.RUnlock()
	if g == nil || !g.mu.TryLock() {
		return 0, false
	}
	defer g.mu.Unlock()
	c := g.consumers[req.Consumer]
	if c == nil || req.Last >= c.next || (req.Last > c.acked && req.First > c.acked+1) {
		return 0, false // unknown, voids to write or a gap to read: Ack
	}
	if req.Last > c.acked {
		// The action log buffers the record in memory (its lock is held
		// only to append or to swap buffers, never across a write).
		if err := s.record(g, &action{kind: actAck, consumer: c.id, seq: req.Last}); err != nil {
			return 0, false // nothing applied; Ack meets and reports it
		}
	}
	c.seen = s.seenAt(&req)
	s.stats.acked.Add(1)
	return c.acked, true
}

// maxGapRetry is the largest ack gap whose messages Ack reads for the
// retry subject (AckResult.Gap). A larger gap, more than any consumer's
// window of un-acked messages should hold, goes back to the group instead,
// a returnChunk at a time.
const maxGapRetry = returnChunk

// ackLocked applies req; it returns the gap's deliveries for the retry
// subject, or how many gap entries it returned to the group instead.
func (s *Store) ackLocked(g *group, c *consumer, req AckRequest) ([]delivery, int, error) {
	if req.Last <= c.acked {
		return nil, 0, nil
	}
	if g.key.broadcast {
		last := min(req.Last, g.cursor-1)
		if last <= c.acked {
			return nil, 0, nil
		}
		return nil, 0, s.record(g, &action{kind: actAck, consumer: c.id, seq: last})
	}
	if req.Last >= c.next {
		// Pull sequences this store does not know (lost in a crash): void.
		if req.Last-c.next >= maxVoid {
			return nil, 0, fmt.Errorf("%w: ack of pull seq %d, consumer %s has pulled %d", ErrInvalidRequest, req.Last, c.id, c.next)
		}
		if err := c.writeVoids(c.next, req.Last+1-c.next); err != nil {
			return nil, 0, err
		}
		if err := s.record(g, &action{kind: actVoid, consumer: c.id, seq: req.Last + 1}); err != nil {
			return nil, 0, err
		}
	}
	var ds []delivery
	returned := 0
	switch gap := req.First - (c.acked + 1); {
	case gap > maxGapRetry:
		n, err := s.returnThrough(g, c, req.First)
		if err != nil {
			return nil, n, err
		}
		returned = n
	case gap > 0:
		from := c.acked + 1
		seqs, err := c.readPullLog(from, gap)
		if err != nil {
			return nil, 0, err
		}
		for i, seq := range seqs {
			if seq == voidEntry {
				continue
			}
			e, ok, err := s.entryAt(g.subj, seq)
			if err != nil {
				return nil, 0, err
			}
			if ok {
				ds = append(ds, delivery{pullSeq: from + int64(i), seq: seq, e: e})
			}
		}
	}
	return ds, returned, s.record(g, &action{kind: actAck, consumer: c.id, seq: req.Last})
}

// ReturnUnacked hands a consumer's un-acked entries back to its group (a
// dead consumer): the group serves them to its other consumers before new
// entries, and the consumer's acked position moves to its pull position. It
// returns how many entries went back.
func (s *Store) ReturnUnacked(subject, group, consumerID string) (int, error) {
	if err := s.errIfReplica(); err != nil {
		return 0, err
	}
	g, c, err := s.lockConsumer(subject, group, consumerID)
	if err != nil {
		return 0, err
	}
	defer g.mu.Unlock()
	return s.returnLocked(g, c)
}

// returnChunk is the most pull seqs one RETURN action hands back: one
// action per returnChunk keeps every action small.
const returnChunk = 4096

// returnLocked hands all of c's un-acked entries back to the group.
func (s *Store) returnLocked(g *group, c *consumer) (int, error) {
	return s.returnThrough(g, c, c.next)
}

// returnThrough hands c's un-acked entries below pull seq end back a
// returnChunk at a time: each RETURN action moves c's acked position to
// its last pull seq, so the pull log is read a chunk at a time too, however
// many c holds.
func (s *Store) returnThrough(g *group, c *consumer, end int64) (int, error) {
	n := 0
	for end-1 > c.acked {
		first := c.acked + 1
		seqs, err := c.readPullLog(first, min(returnChunk, end-first))
		if err != nil {
			return n, err
		}
		var kept []int64
		for _, v := range seqs {
			if v != voidEntry {
				kept = append(kept, v)
			}
		}
		last := first + int64(len(seqs)) - 1
		if err := s.record(g, &action{kind: actReturn, consumer: c.id, seq: last, runs: toRuns(kept)}); err != nil {
			return n, err
		}
		n += len(kept)
	}
	return n, nil
}

// RemoveConsumer hands the consumer's un-acked entries back to its group and
// forgets it, deleting its pull log (a consumer gone for good).
func (s *Store) RemoveConsumer(subject, group, consumerID string) error {
	if err := s.errIfReplica(); err != nil {
		return err
	}
	g, c, err := s.lockConsumer(subject, group, consumerID)
	if err != nil {
		return err
	}
	defer g.mu.Unlock()
	if _, err := s.returnLocked(g, c); err != nil {
		return err
	}
	return s.record(g, &action{kind: actRemove, consumer: c.id})
}

func (s *Store) lockConsumer(subject, group, consumerID string) (*group, *consumer, error) {
	if s.isClosed() {
		return nil, nil, ErrClosed
	}
	g, _, err := s.groupFor(groupKey{subject: subject, group: group}, false, false)
	if err != nil {
		return nil, nil, err
	}
	if g == nil {
		return nil, nil, fmt.Errorf("%w: %s/%s", ErrUnknownGroup, subject, group)
	}
	g.mu.Lock()
	c := g.consumers[consumerID]
	if c == nil {
		g.mu.Unlock()
		return nil, nil, fmt.Errorf("%w: %s in %s/%s", ErrUnknownConsumer, consumerID, subject, group)
	}
	return g, c, nil
}

// ResetKind says where ResetGroup moves a cursor.
type ResetKind uint8

// Reset positions.
const (
	ResetEarliest ResetKind = iota // the oldest kept message
	ResetLatest                    // after the newest message
	ResetTime                      // the first message appended at or after a time
)

// ResetGroup moves a group's cursor (creating the group if needed) and
// clears its returned queue; consumers keep their un-acked entries. It
// returns the new cursor.
func (s *Store) ResetGroup(subject, group string, kind ResetKind, at time.Time) (int64, error) {
	if err := s.errIfReplica(); err != nil {
		return 0, err
	}
	if err := s.checkNames(subject, group, "reset", false); err != nil {
		return 0, err
	}
	if s.isClosed() {
		return 0, ErrClosed
	}
	g, _, err := s.groupFor(groupKey{subject: subject, group: group}, true, false)
	if err != nil {
		return 0, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	lo, visible := g.subj.bounds()
	cursor := visible
	switch kind {
	case ResetEarliest:
		cursor = lo
	case ResetTime:
		if cursor, err = s.seqAtTime(g.subj, lo, visible, at.UnixMilli()); err != nil {
			return 0, err
		}
	}
	if err := s.record(g, &action{kind: actReset, seq: cursor}); err != nil {
		return 0, err
	}
	return cursor, nil
}

// seqAtTime finds the first sequence in [lo, hi) appended at or after ms
// (append times never decrease within a subject).
func (s *Store) seqAtTime(sj *subject, lo, hi, ms int64) (int64, error) {
	var ferr error
	i := sort.Search(int(hi-lo), func(i int) bool {
		var b [entryWidth]byte
		n, err := sj.readEntries(lo+int64(i), b[:])
		if err != nil || n == 0 {
			ferr = err
			return true
		}
		e, _ := decodeEntry(b[:])
		return e.timestamp >= ms
	})
	return lo + int64(i), ferr
}

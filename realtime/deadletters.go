package realtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/realtime/store"
)

// Dead letters are the messages of a group's %DEAD%<subject>%<group>
// subject: stored like any other, never pulled by the group. Operators list
// and inspect them, re-drive them (a copy goes to the group's retry subject
// with a fresh attempt count, due at once) and purge them. The store is
// append-only, so re-driven and purged letters are remembered as removed:
// per dead subject a watermark (every sequence below it is removed: "purge
// all") and a set of removed sequences.
//
// Removals are recorded in the dead subject itself, as tombstones: a
// message whose id starts qmq-tombstone-, whose property qmq.dead.removed
// is set and whose body holds the removal (JSON: the watermark and the
// sequences). They travel with the
// log, so a slave has them and a promoted slave knows what its master
// removed; they are kept as long as the letters they remove (retention
// deletes the older letters first); and they are never listed nor counted
// as letters. A dead subject's state is read from its tombstones the
// first time an admin request asks for it, and kept up to date after. A
// re-drive appends the copies first and the tombstone after, so a crash in
// between re-drives a letter twice rather than losing it.
//
// Brokers before tombstones kept the state in deadletters.json in the data
// directory; it is still read, and merged under what tombstones say.

const (
	legacyDeadLettersFile = "deadletters.json"
	tombstoneProperty     = "qmq.dead.removed"
	tombstoneIDPrefix     = "qmq-tombstone-"
)

type deadLetters struct {
	mu     sync.Mutex
	legacy map[string]*deadState // deadletters.json, read once
	state  map[string]*deadState // by dead subject, once read from its tombstones
	seq    atomic.Int64          // makes tombstone ids unique within the process
}

type deadState struct {
	Through int64          `json:"through"`
	Removed map[int64]bool `json:"removed,omitempty"`
}

// reset forgets the states read from tombstones (a new master term: its
// log may hold other tombstones than the last one read).
func (dl *deadLetters) reset() {
	dl.mu.Lock()
	clear(dl.state)
	dl.mu.Unlock()
}

func (d *deadState) removed(seq int64) bool { return seq < d.Through || d.Removed[seq] }

// add merges a removal into the state: every sequence below through, and
// seqs.
func (d *deadState) add(seqs []int64, through int64) {
	if through > d.Through {
		d.Through = through
	}
	for _, q := range seqs {
		if q >= d.Through {
			if d.Removed == nil {
				d.Removed = map[int64]bool{}
			}
			d.Removed[q] = true
		}
	}
	for q := range d.Removed {
		if q < d.Through {
			delete(d.Removed, q)
		}
	}
}

func (d *deadState) clone() deadState {
	st := deadState{Through: d.Through, Removed: make(map[int64]bool, len(d.Removed))}
	for k := range d.Removed {
		st.Removed[k] = true
	}
	return st
}

// tombstone is the body of a tombstone message.
type tombstone struct {
	Through int64   `json:"through,omitempty"`
	Removed []int64 `json:"removed,omitempty"`
}

func openDeadLetters(dir string) (*deadLetters, error) {
	d := &deadLetters{legacy: map[string]*deadState{}, state: map[string]*deadState{}}
	path := filepath.Join(dir, legacyDeadLettersFile)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return d, nil
	case err != nil:
		return nil, fmt.Errorf("realtime: %w", err)
	}
	if err := json.Unmarshal(b, &d.legacy); err != nil {
		return nil, fmt.Errorf("realtime: %s is damaged: %w", path, err)
	}
	return d, nil
}

// isTombstone reports whether a stored message of a dead subject is a
// tombstone, and returns its removal.
func isTombstone(raw []byte) (tombstone, bool) {
	// The store checked the record's CRC when it read it.
	v, err := protocol.ParseMessageNoCRC(raw)
	if err != nil || v.PropertyCount() == 0 || !bytes.HasPrefix(v.ID, []byte(tombstoneIDPrefix)) {
		return tombstone{}, false
	}
	found := false
	v.Properties(func(key, _ []byte) bool {
		found = string(key) == tombstoneProperty
		return !found
	})
	if !found {
		return tombstone{}, false
	}
	var t tombstone
	if err := json.Unmarshal(v.Body, &t); err != nil {
		return tombstone{}, true // a damaged record removes nothing, and is no letter
	}
	return t, true
}

// deadState returns a copy of the state of dead subject dead, reading its
// tombstones the first time.
func (b *Broker) deadState(dead string) (deadState, error) {
	d := b.dead
	d.mu.Lock()
	defer d.mu.Unlock()
	st, err := b.loadDeadLocked(dead)
	if err != nil {
		return deadState{}, err
	}
	return st.clone(), nil
}

// loadDeadLocked returns the state of dead, reading it from the legacy file
// and the subject's tombstones if it is not in memory yet (d.mu held).
func (b *Broker) loadDeadLocked(dead string) (*deadState, error) {
	d := b.dead
	if st := d.state[dead]; st != nil {
		return st, nil
	}
	st := &deadState{}
	if old := d.legacy[dead]; old != nil {
		seqs := make([]int64, 0, len(old.Removed))
		for q := range old.Removed {
			seqs = append(seqs, q)
		}
		st.add(seqs, old.Through)
	}
	for from := int64(0); ; {
		msgs, err := b.st().Read(dead, from, 1000)
		if errors.Is(err, store.ErrUnknownSubject) {
			break
		}
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if t, ok := isTombstone(m.Message); ok {
				st.add(t.Removed, t.Through)
			}
		}
		if len(msgs) < 1000 {
			break
		}
		from = msgs[len(msgs)-1].ConsumeSeq + 1
	}
	d.state[dead] = st
	return st, nil
}

// removeDead records seqs (and everything below through) as removed from
// dead: a tombstone appended to the subject, then the state in memory.
func (b *Broker) removeDead(dead string, seqs []int64, through int64) error {
	d := b.dead
	raw, err := protocol.AppendMessage(nil, &protocol.Message{
		Subject:    dead,
		ID:         fmt.Sprintf("%s%d-%d", tombstoneIDPrefix, time.Now().UnixNano(), d.seq.Add(1)),
		Properties: []protocol.Property{{Key: tombstoneProperty, Value: "1"}},
		Body:       mustJSON(tombstone{Through: through, Removed: seqs}),
	}, b.limits)
	if err != nil {
		return err
	}
	res, err := b.st().Append(context.Background(), [][]byte{raw})
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		return fmt.Errorf("record the removal: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	st, err := b.loadDeadLocked(dead) // reads the new tombstone too when not loaded yet
	if err != nil {
		return err
	}
	st.add(seqs, through)
	return nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // a tombstone always marshals
	}
	return b
}

// scanDead calls fn for every dead letter of subject not removed, in order,
// until fn returns false.
func (b *Broker) scanDead(dead string, from int64, st *deadState, fn func(p store.Pulled) bool) error {
	from = max(from, st.Through)
	for {
		msgs, err := b.st().Read(dead, from, 1000)
		if errors.Is(err, store.ErrUnknownSubject) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if st.removed(m.ConsumeSeq) {
				continue
			}
			if _, ok := isTombstone(m.Message); ok {
				continue
			}
			if !fn(m) {
				return nil
			}
		}
		if len(msgs) < 1000 {
			return nil
		}
		from = msgs[len(msgs)-1].ConsumeSeq + 1
	}
}

// serveDeadLetters lists, inspects, re-drives and purges a group's dead
// letters.
func (b *Broker) serveDeadLetters(r *netserver.Request) {
	q, err := protocol.DecodeDeadLettersRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if err := b.limits.CheckSubject(q.Subject); err != nil {
		r.ReplyError(err)
		return
	}
	if err := b.limits.CheckGroup(q.Group); err != nil {
		r.ReplyError(err)
		return
	}
	if p := r.Conn.Principal(); q.Action == protocol.DeadLettersList || q.Action == protocol.DeadLettersInspect {
		if !p.CanReadBodies() {
			refuse(r, p, "read dead letters of "+q.Subject+"/"+q.Group+" (their bodies: read bodies)")
			return
		}
	} else if !p.CanAdminWrite() {
		refuse(r, p, "re-drive or purge dead letters of "+q.Subject+"/"+q.Group+" (admin write)")
		return
	}
	dead := protocol.DeadSubject(q.Subject, q.Group)
	st, err := b.deadState(dead)
	if err != nil {
		r.ReplyError(pullStatus(err))
		return
	}
	want := map[string]bool{}
	for _, id := range q.IDs {
		want[id] = true
	}
	matches := func(p store.Pulled) bool {
		if len(want) == 0 {
			return true
		}
		v, err := protocol.ParseMessage(p.Message)
		return err == nil && want[string(v.ID)]
	}
	var resp protocol.DeadLettersResponse
	switch q.Action {
	case protocol.DeadLettersList, protocol.DeadLettersInspect:
		limit := int(q.Max)
		if limit <= 0 || limit > 1000 {
			limit = 1000
		}
		from := int64(0)
		if q.Action == protocol.DeadLettersList && q.After > 0 {
			from = int64(q.After) + 1
		}
		err = b.scanDead(dead, from, &st, func(p store.Pulled) bool {
			if matches(p) {
				resp.Letters = append(resp.Letters, protocol.DeadLetter{Seq: uint64(p.ConsumeSeq), Message: p.Message})
			}
			return len(resp.Letters) < limit
		})
	case protocol.DeadLettersRedrive:
		resp.Affected, err = b.redrive(q, dead, &st, matches)
	case protocol.DeadLettersPurge:
		resp.Affected, err = b.purge(q, dead, &st, matches)
	default:
		err = protocol.Errorf(protocol.StatusBadRequest, fmt.Sprintf("unknown dead-letter action %v", q.Action))
	}
	if err != nil {
		r.ReplyError(pullStatus(err))
		return
	}
	if st, err = b.deadState(dead); err != nil {
		r.ReplyError(pullStatus(err))
		return
	}
	b.scanDead(dead, 0, &st, func(store.Pulled) bool { resp.Total++; return true })
	r.Reply(protocol.StatusOK, protocol.AppendDeadLettersResponse(nil, &resp))
}

// redrive sends the matching dead letters to the group's retry subject
// with a fresh attempt count, then records them as removed.
func (b *Broker) redrive(q protocol.DeadLettersRequest, dead string, st *deadState, matches func(store.Pulled) bool) (uint64, error) {
	if err := b.writable(b.cur()); err != nil {
		return 0, err
	}
	var copies [][]byte
	var seqs []int64
	var scanErr error
	err := b.scanDead(dead, 0, st, func(p store.Pulled) bool {
		if !matches(p) {
			return true
		}
		m, err := protocol.DecodeMessage(p.Message)
		if err != nil {
			return true // damaged copies are never served: skip it
		}
		m.Subject = protocol.RetrySubject(q.Subject, q.Group)
		m.Attempts = 0
		m.DeliverAt = time.Time{} // due at once
		raw, err := protocol.AppendMessage(nil, m, b.limits)
		if err != nil {
			scanErr = err
			return false
		}
		copies = append(copies, raw)
		seqs = append(seqs, p.ConsumeSeq)
		return len(copies) < 100000
	})
	if err == nil {
		err = scanErr
	}
	if err != nil || len(copies) == 0 {
		return 0, err
	}
	results, err := b.st().Append(context.Background(), copies)
	if err != nil {
		return 0, err
	}
	done := seqs[:0]
	for i, res := range results {
		if res.Err == nil {
			done = append(done, seqs[i])
		}
	}
	if err := b.removeDead(dead, done, 0); err != nil {
		return uint64(len(done)), fmt.Errorf("re-driven, but recording it failed (they may be re-driven again): %w", err)
	}
	return uint64(len(done)), nil
}

// purge records the matching dead letters (all without ids) as removed.
func (b *Broker) purge(q protocol.DeadLettersRequest, dead string, st *deadState, matches func(store.Pulled) bool) (uint64, error) {
	var seqs []int64
	var last int64 = -1
	err := b.scanDead(dead, 0, st, func(p store.Pulled) bool {
		if matches(p) {
			seqs = append(seqs, p.ConsumeSeq)
		}
		last = p.ConsumeSeq
		return true
	})
	if err != nil || len(seqs) == 0 {
		return 0, err
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	if len(q.IDs) == 0 {
		return uint64(len(seqs)), b.removeDead(dead, nil, last+1)
	}
	return uint64(len(seqs)), b.removeDead(dead, seqs, 0)
}

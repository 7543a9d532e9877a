package realtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/qmq-go/qmq/pkg/fsutil"
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
// all") and a set of removed sequences, kept in deadletters.json in the
// data directory (written temp → fsync → rename → fsync dir). A re-drive
// appends the copies first and records the removal after, so a crash in
// between re-drives a letter twice rather than losing it.

const deadLettersFile = "deadletters.json"

type deadLetters struct {
	mu    sync.Mutex
	path  string
	state map[string]*deadState // by dead subject
}

type deadState struct {
	Through int64          `json:"through"`
	Removed map[int64]bool `json:"removed,omitempty"`
}

func (d *deadState) removed(seq int64) bool { return seq < d.Through || d.Removed[seq] }

func openDeadLetters(dir string) (*deadLetters, error) {
	d := &deadLetters{path: filepath.Join(dir, deadLettersFile), state: map[string]*deadState{}}
	b, err := os.ReadFile(d.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return d, nil
	case err != nil:
		return nil, fmt.Errorf("realtime: %w", err)
	}
	if err := json.Unmarshal(b, &d.state); err != nil {
		return nil, fmt.Errorf("realtime: %s is damaged: %w", d.path, err)
	}
	return d, nil
}

// get returns a copy of the state of dead subject s.
func (d *deadLetters) get(s string) deadState {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := deadState{Removed: map[int64]bool{}}
	if cur := d.state[s]; cur != nil {
		st.Through = cur.Through
		for k := range cur.Removed {
			st.Removed[k] = true
		}
	}
	return st
}

// remove records seqs (or, with all, everything below through) as removed
// and persists the state.
func (d *deadLetters) remove(s string, seqs []int64, all bool, through int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.state[s]
	if st == nil {
		st = &deadState{}
		d.state[s] = st
	}
	if all && through > st.Through {
		st.Through = through
	}
	for _, q := range seqs {
		if q >= st.Through {
			if st.Removed == nil {
				st.Removed = map[int64]bool{}
			}
			st.Removed[q] = true
		}
	}
	for q := range st.Removed {
		if q < st.Through {
			delete(st.Removed, q)
		}
	}
	b, err := json.Marshal(d.state)
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(fsutil.OS, d.path, b)
}

// scanDead calls fn for every dead letter of subject not removed, in order,
// until fn returns false.
func (b *Broker) scanDead(dead string, from int64, st *deadState, fn func(p store.Pulled) bool) error {
	from = max(from, st.Through)
	for {
		msgs, err := b.store.Read(dead, from, 1000)
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
	dead := protocol.DeadSubject(q.Subject, q.Group)
	st := b.dead.get(dead)
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
	st = b.dead.get(dead)
	b.scanDead(dead, 0, &st, func(store.Pulled) bool { resp.Total++; return true })
	r.Reply(protocol.StatusOK, protocol.AppendDeadLettersResponse(nil, &resp))
}

// redrive sends the matching dead letters to the group's retry subject
// with a fresh attempt count, then records them as removed.
func (b *Broker) redrive(q protocol.DeadLettersRequest, dead string, st *deadState, matches func(store.Pulled) bool) (uint64, error) {
	if err := b.writable(); err != nil {
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
	results, err := b.store.Append(context.Background(), copies)
	if err != nil {
		return 0, err
	}
	done := seqs[:0]
	for i, res := range results {
		if res.Err == nil {
			done = append(done, seqs[i])
		}
	}
	if err := b.dead.remove(dead, done, false, 0); err != nil {
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
		return uint64(len(seqs)), b.dead.remove(dead, nil, true, last+1)
	}
	return uint64(len(seqs)), b.dead.remove(dead, seqs, false, 0)
}

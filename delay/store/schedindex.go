package store

import (
	"errors"
	"hash/maphash"
	"os"
	"path/filepath"
	"sync"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// schedIndex finds stored messages by (subject, message id) and by
// (subject, schedule key) for Cancel and for the key rule of Append. It
// holds hashes and locations only (no strings, no bodies): a lookup reads
// the record it points to and checks the names, so a hash collision costs
// a read, never a wrong answer. Messages enter it when the replay writes
// them into their hour file (and at Open, from the hour files with
// messages not yet dispatched); they leave it with their hour (retention).
// Keys being appended (not yet replayed) are reserved in byKey.
type schedIndex struct {
	mu    sync.Mutex
	seed  maphash.Seed
	byKey map[uint64]keyRef
	byID  map[uint64]uint64   // hash(subject, id) → location
	more  map[uint64][]uint64 // further locations of the same id hash (a message stored twice)
}

// keyRef is where a key's latest message is, its due time and its id hash.
type keyRef struct {
	loc uint64
	due int64
	id  uint64
}

// reservedLoc marks a key whose message is being appended (not yet
// replayed); its due is reservedStored once the append is acknowledged.
const (
	reservedLoc    = ^uint64(0)
	reservedStored = 1
)

func newSchedIndex() *schedIndex {
	return &schedIndex{seed: maphash.MakeSeed(), byKey: map[uint64]keyRef{}, byID: map[uint64]uint64{}, more: map[uint64][]uint64{}}
}

// packLoc names a record: hour (signed, 24 bits) and offset (40 bits).
func packLoc(h, off int64) uint64 { return uint64(h)<<40 | uint64(off)&(maxScheduleFile-1) }

func unpackLoc(l uint64) (h, off int64) { return int64(l) >> 40, int64(l & (maxScheduleFile - 1)) }

func (x *schedIndex) hash(kind byte, subject, name []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(x.seed)
	h.Write(subject)
	h.WriteByte(kind)
	h.Write(name)
	return h.Sum64()
}

func (x *schedIndex) idHash(subject, id []byte) uint64   { return x.hash(0, subject, id) }
func (x *schedIndex) keyHash(subject, key []byte) uint64 { return x.hash(1, subject, key) }

// scheduleKey returns the message's schedule key property, if it has one.
func scheduleKey(v *protocol.View) (key []byte, ok bool) {
	v.Properties(func(k, val []byte) bool {
		if string(k) == protocol.PropScheduleKey {
			key, ok = val, true
			return false
		}
		return true
	})
	return key, ok
}

// indexed is one message to index: its location, hashes and due time.
type indexed struct {
	loc, id, key uint64
	hasKey       bool
	due          int64
}

// entryOf hashes the names of the message v stored at loc.
func (x *schedIndex) entryOf(loc uint64, v *protocol.View) indexed {
	e := indexed{loc: loc, id: x.idHash(v.Subject, v.ID), due: v.DeliverAtMillis}
	if key, ok := scheduleKey(v); ok {
		e.key, e.hasKey = x.keyHash(v.Subject, key), true
	}
	return e
}

// addLocked indexes a message.
func (x *schedIndex) addLocked(e indexed) {
	if old, ok := x.byID[e.id]; ok && old != e.loc {
		for _, l := range x.more[e.id] {
			if l == e.loc {
				return
			}
		}
		x.more[e.id] = append(x.more[e.id], e.loc)
	} else {
		x.byID[e.id] = e.loc
	}
	if e.hasKey {
		x.byKey[e.key] = keyRef{loc: e.loc, due: e.due, id: e.id}
	}
}

// add indexes messages.
func (x *schedIndex) add(es []indexed) {
	if len(es) == 0 {
		return
	}
	x.mu.Lock()
	for _, e := range es {
		x.addLocked(e)
	}
	x.mu.Unlock()
}

// idLocs returns the locations indexed under an id hash.
func (x *schedIndex) idLocsLocked(idh uint64) []uint64 {
	loc, ok := x.byID[idh]
	if !ok {
		return nil
	}
	return append([]uint64{loc}, x.more[idh]...)
}

// dropHours removes the entries of hours removed by retention.
func (x *schedIndex) dropHours(hours map[int64]bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	in := func(l uint64) bool { h, _ := unpackLoc(l); return l != reservedLoc && hours[h] }
	for k, r := range x.byKey {
		if in(r.loc) {
			delete(x.byKey, k)
		}
	}
	for k, l := range x.byID {
		if in(l) {
			delete(x.byID, k)
		}
	}
	for k, ls := range x.more {
		out := ls[:0]
		for _, l := range ls {
			if !in(l) {
				out = append(out, l)
			}
		}
		if len(out) == 0 {
			delete(x.more, k)
		} else {
			x.more[k] = out
		}
	}
	for k, ls := range x.more {
		if _, ok := x.byID[k]; !ok && len(ls) > 0 {
			x.byID[k] = ls[0]
			if len(ls) == 1 {
				delete(x.more, k)
			} else {
				x.more[k] = ls[1:]
			}
		}
	}
}

// rebuildIndex indexes, at Open, the messages of every hour file that
// still has messages not dispatched (the replay indexes what it adds
// later), and fills the cancelled set from the cancel entries of the
// dispatch logs. Hours fully dispatched are not indexed: their messages
// are answered "not found" after a restart.
func (s *Store) rebuildIndex() error {
	for h, st := range s.hours {
		if st.size == 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.dir, dispatchDir, hourName(h)))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		done, _ := parseDispatch(b)
		if int64(len(done)) >= st.records {
			continue
		}
		for _, off := range parseCancels(b) {
			s.cancelled.mark(h, off, cancelCounted)
		}
		cf, err := s.schedules.acquire(h, false)
		if err != nil {
			return err
		}
		var batch []indexed
		scanSchedule(cf.f, st.size, maxRecordSize, func(off int64, msg []byte) {
			if v, err := protocol.ParseMessageNoCRC(msg); err == nil {
				batch = append(batch, s.idx.entryOf(packLoc(h, off), &v))
			}
		})
		s.schedules.release(cf)
		s.idx.add(batch)
	}
	return nil
}

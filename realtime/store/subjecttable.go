package store

import (
	"hash/maphash"
	"sync/atomic"
)

// subjectTable finds a subject by name without a lock: every message's
// lookup (AppendAsync on the callers' goroutines, the replica's indexing)
// reads it, and a read lock on subjectsMu, a counter all those goroutines
// write, cost each message a cache line moved between cores.
//
// It is an open-addressing table (linear probing) that only grows: subjects
// are never removed while the store is open. Its one writer is subjectFor,
// under subjectsMu. A slot is written once: its hash and name, then its
// subject with an atomic store, so a reader that loads a subject sees the
// hash and name written before it. A slot holds its subject's name so that
// a probe reads the slot's line and the name's bytes, not the subject's
// lines too (the appender reads those, on another core). The table doubles
// at three quarters full into a new slot array that is filled before it is
// published, so a reader sees either the old array, complete up to the
// subjects it holds, or the new one.
//
//	slot (32 bytes): subject *subject (nil: empty, ends a probe) | hash uint64 | name string
//
// The map subjects stays the store's list of subjects (iteration, Close).
type subjectTable struct {
	seed  maphash.Seed
	slots atomic.Pointer[[]subjectSlot]
	count int // writer only
}

type subjectSlot struct {
	subj atomic.Pointer[subject]
	hash uint64
	name string
}

// subjectTableFirst is the table's first size in slots.
const subjectTableFirst = 64

// lookup returns the subject named name, or nil.
func (t *subjectTable) lookup(name []byte) *subject {
	p := t.slots.Load()
	if p == nil {
		return nil
	}
	return probe(*p, maphash.Bytes(t.seed, name), name)
}

// lookupString is lookup for a name held as a string.
func (t *subjectTable) lookupString(name string) *subject {
	p := t.slots.Load()
	if p == nil {
		return nil
	}
	return probe(*p, maphash.String(t.seed, name), name)
}

// probe walks the probe sequence of hash h to name's subject or an empty
// slot.
func probe[T string | []byte](slots []subjectSlot, h uint64, name T) *subject {
	mask := uint64(len(slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		sj := slots[i].subj.Load()
		if sj == nil {
			return nil
		}
		if slots[i].hash == h && slots[i].name == string(name) {
			return sj
		}
	}
}

// insert adds sj, which the table does not hold; subjectsMu is held.
func (t *subjectTable) insert(sj *subject) {
	p := t.slots.Load()
	if p == nil {
		t.seed = maphash.MakeSeed()
		slots := make([]subjectSlot, subjectTableFirst)
		p = &slots
		t.slots.Store(p)
	}
	if 4*(t.count+1) > 3*len(*p) {
		grown := make([]subjectSlot, 2*len(*p))
		for i := range *p {
			if old := (*p)[i].subj.Load(); old != nil {
				place(grown, (*p)[i].hash, old)
			}
		}
		p = &grown
		t.slots.Store(p)
	}
	place(*p, maphash.String(t.seed, sj.name), sj)
	t.count++
}

// place puts sj in the first empty slot of its probe sequence.
func place(slots []subjectSlot, h uint64, sj *subject) {
	mask := uint64(len(slots) - 1)
	i := h & mask
	for slots[i].subj.Load() != nil {
		i = (i + 1) & mask
	}
	slots[i].hash, slots[i].name = h, sj.name
	slots[i].subj.Store(sj)
}

package realtime

import (
	"hash/maphash"
	"sync"
	"time"
)

// dedupe remembers the (subject, id, attempts) of stored messages for a
// window, so a producer's retry or a delay server's re-forward of a message
// already stored is answered "duplicate" instead of stored again.
//
// Each of 16 shards holds two generations of 64-bit hashes in open-addressing
// tables: lookups check both; inserts go to the current one, which becomes
// the previous one (and the old previous one is cleared for reuse) when it is
// window/2 old or holds its share of capacity/2 hashes. An id is therefore
// remembered for at least window/2 and at most window — shorter when more
// than capacity ids arrive per window. Memory is fixed at New: 2 generations
// × a table of twice the shard's share, 8 bytes a slot, about 32 bytes per id
// of capacity (32 MB for the default 1,000,000). 64-bit hashes make a false
// "duplicate" astronomically unlikely (about n²/2⁶⁵ over n ids).
//
// A hash is reserved before the append and released if the append fails,
// so two copies of one message racing in separate requests store once.
type dedupe struct {
	seed   maphash.Seed
	window time.Duration
	now    func() time.Time
	shards [dedupeShards]dedupeShard
	on     bool
}

const dedupeShards = 16

type dedupeShard struct {
	mu      sync.Mutex
	cur     hashSet
	prev    hashSet
	limit   int // hashes per generation
	rotated time.Time
}

func newDedupe(window time.Duration, capacity int, now func() time.Time) *dedupe {
	d := &dedupe{seed: maphash.MakeSeed(), window: window, now: now, on: window > 0 && capacity > 0}
	if !d.on {
		return d
	}
	limit := max(capacity/2/dedupeShards, 16)
	for i := range d.shards {
		s := &d.shards[i]
		s.limit = limit
		s.cur = newHashSet(limit)
		s.prev = newHashSet(limit)
		s.rotated = now()
	}
	return d
}

func (d *dedupe) enabled() bool { return d.on }

func (d *dedupe) key(subject, id []byte, attempts uint16) uint64 {
	var h maphash.Hash
	h.SetSeed(d.seed)
	h.Write(subject)
	h.WriteByte(0)
	h.Write(id)
	h.WriteByte(byte(attempts >> 8))
	h.WriteByte(byte(attempts))
	return h.Sum64()
}

func (d *dedupe) shard(k uint64) *dedupeShard { return &d.shards[k>>60] }

// reserve records k and reports whether it was new.
func (d *dedupe) reserve(k uint64) bool {
	s := d.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur.has(k) || s.prev.has(k) {
		return false
	}
	if s.cur.used >= s.limit {
		s.rotate(d.now())
	} else if s.cur.used&1023 == 0 {
		if now := d.now(); now.Sub(s.rotated) >= d.window/2 {
			s.rotate(now)
		}
	}
	s.cur.add(k)
	return true
}

func (s *dedupeShard) rotate(now time.Time) {
	s.prev, s.cur = s.cur, s.prev
	s.cur.reset()
	s.rotated = now
}

// release forgets k (its append failed).
func (d *dedupe) release(k uint64) {
	s := d.shard(k)
	s.mu.Lock()
	s.cur.remove(k)
	s.prev.remove(k)
	s.mu.Unlock()
}

// hashSet is an open-addressing set of 64-bit hashes with linear probing,
// sized for at most half full. 0 marks an empty slot and 1 a removed one;
// keys are moved out of that range.
type hashSet struct {
	slots []uint64
	mask  uint64
	used  int // filled slots, removed ones included
}

const (
	slotEmpty   = 0
	slotRemoved = 1
)

func newHashSet(n int) hashSet {
	size := 1
	for size < 2*n {
		size <<= 1
	}
	return hashSet{slots: make([]uint64, size), mask: uint64(size - 1)}
}

func fixKey(k uint64) uint64 {
	if k <= slotRemoved {
		k += 2
	}
	return k
}

func (h *hashSet) has(k uint64) bool {
	k = fixKey(k)
	for i := k & h.mask; ; i = (i + 1) & h.mask {
		switch h.slots[i] {
		case k:
			return true
		case slotEmpty:
			return false
		}
	}
}

func (h *hashSet) add(k uint64) {
	k = fixKey(k)
	for i := k & h.mask; ; i = (i + 1) & h.mask {
		if s := h.slots[i]; s == slotEmpty || s == slotRemoved || s == k {
			if s == slotEmpty {
				h.used++
			}
			h.slots[i] = k
			return
		}
	}
}

func (h *hashSet) remove(k uint64) {
	k = fixKey(k)
	for i := k & h.mask; ; i = (i + 1) & h.mask {
		switch h.slots[i] {
		case k:
			h.slots[i] = slotRemoved
			return
		case slotEmpty:
			return
		}
	}
}

func (h *hashSet) reset() {
	clear(h.slots)
	h.used = 0
}

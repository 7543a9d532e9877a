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
// Two generations of hashes: lookups check both; inserts go to the current
// one, which becomes the previous one when it is window/2 old or holds
// capacity/2 hashes. An id is therefore remembered for at least window/2 and
// at most window — shorter when more than capacity ids arrive per window.
// Memory is about 24 bytes per remembered id. 64-bit hashes make a false
// "duplicate" astronomically unlikely (about n²/2⁶⁵ over n ids).
//
// A hash is reserved before the append and released if the append fails,
// so two copies of one message racing in separate requests store once.
type dedupe struct {
	seed     maphash.Seed
	window   time.Duration
	capacity int
	now      func() time.Time

	mu      sync.Mutex
	cur     map[uint64]struct{}
	prev    map[uint64]struct{}
	rotated time.Time
}

func newDedupe(window time.Duration, capacity int, now func() time.Time) *dedupe {
	return &dedupe{
		seed: maphash.MakeSeed(), window: window, capacity: capacity, now: now,
		cur: map[uint64]struct{}{}, prev: map[uint64]struct{}{}, rotated: now(),
	}
}

func (d *dedupe) enabled() bool { return d.window > 0 && d.capacity > 0 }

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

// reserve records k and reports whether it was new.
func (d *dedupe) reserve(k uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.cur[k]; ok {
		return false
	}
	if _, ok := d.prev[k]; ok {
		return false
	}
	if now := d.now(); len(d.cur) >= d.capacity/2 || now.Sub(d.rotated) >= d.window/2 {
		d.prev, d.cur, d.rotated = d.cur, make(map[uint64]struct{}, len(d.cur)), now
	}
	d.cur[k] = struct{}{}
	return true
}

// release forgets k (its append failed).
func (d *dedupe) release(k uint64) {
	d.mu.Lock()
	delete(d.cur, k)
	delete(d.prev, k)
	d.mu.Unlock()
}

func (d *dedupe) size() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.cur) + len(d.prev)
}

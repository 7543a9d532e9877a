package realtime

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/hugemem"
)

// dedupe remembers the (subject, id, attempts) of stored messages for a
// window, so a producer's retry or a delay server's re-forward of a message
// already stored is answered "duplicate" instead of stored again.
//
// Each of 16 shards holds two generations of 64-bit hashes in one
// open-addressing table (generationSet): lookups check both; inserts go to
// the current one, which becomes the previous one (and the old previous one
// is cleared for reuse) when it is window/2 old or holds its share of
// capacity/2 hashes. An id is therefore remembered for at least window/2
// and at most window — shorter when more than capacity ids arrive per
// window. Memory is fixed at New: 2 generations × a table of twice the
// shard's share, 8 bytes a slot, about 32 bytes per id of capacity (32 MB
// for the default 1,000,000). 64-bit hashes make a false "duplicate"
// astronomically unlikely (about n²/2⁶⁵ over n ids).
//
// A hash is reserved before the append and released if the append fails,
// so two copies of one message racing in separate requests store once.
//
// The table lives in memory only. A master that starts (a restart, or a
// slave promoted by a failover) fills it again from the newest messages
// of its log, in the background (seedDedupeLoop): until that ends a resent
// copy of an older message may still be stored twice.
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
	set     generationSet
	limit   int // hashes per generation
	rotated time.Time
}

func newDedupe(window time.Duration, capacity int, now func() time.Time) *dedupe {
	d := &dedupe{seed: maphash.MakeSeed(), window: window, now: now, on: window > 0 && capacity > 0}
	if !d.on {
		return d
	}
	limit := max(capacity/2/dedupeShards, 16)
	per := generationSlots(limit)
	slots := hugemem.Uint64s(dedupeShards * per) // one allocation: huge pages
	for i := range d.shards {
		s := &d.shards[i]
		s.limit = limit
		s.set = newGenerationSet(slots[i*per : (i+1)*per : (i+1)*per])
		s.rotated = now()
	}
	return d
}

func (d *dedupe) enabled() bool { return d.on }

// key hashes (subject, id, attempts). Most keys fit a small buffer on the
// stack and are hashed in one call: maphash.Bytes gives the same hash as
// the Hash fed the same bytes piece by piece, 35 ns instead of 41 here.
func (d *dedupe) key(subject, id []byte, attempts uint16) uint64 {
	if n := len(subject) + len(id) + 3; n <= keyBuf {
		var buf [keyBuf]byte
		b := append(buf[:0], subject...)
		b = append(b, 0)
		b = append(b, id...)
		b = append(b, byte(attempts>>8), byte(attempts))
		return maphash.Bytes(d.seed, b)
	}
	var h maphash.Hash
	h.SetSeed(d.seed)
	h.Write(subject)
	h.WriteByte(0)
	h.Write(id)
	h.WriteByte(byte(attempts >> 8))
	h.WriteByte(byte(attempts))
	return h.Sum64()
}

// keyBuf is the largest key hashed from a buffer on the stack.
const keyBuf = 128

func (d *dedupe) shard(k uint64) *dedupeShard { return &d.shards[k>>60] }

// touch reads the first slot k's lookup will read and returns it; a caller
// about to reserve many keys touches them all first, so that their cache
// misses overlap instead of coming one after another. It takes no lock: the
// slots are written atomically and the word read means nothing.
func (d *dedupe) touch(k uint64) uint64 {
	s := d.shard(k)
	return atomic.LoadUint64(&s.set.slots[2*(fixKey(k)&s.set.mask)])
}

// reserve records k and reports whether it was new.
func (d *dedupe) reserve(k uint64) bool {
	s := d.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	return d.reserveLocked(s, k)
}

// reserveBatch reserves keys[i] for every i with take[i] set, as reserve
// would one by one in order, and leaves take[i] set only for the keys that
// were new. It takes each shard's lock once for all of the batch's keys in
// that shard (order holds their positions, grouped by shard; len(keys)
// elements, reused), not once a key: a send of 256 messages took 256
// locks, and two sends checked at once met on every shard, each wait a
// sleep and a wake-up (the scheduler's latency profile of a producing
// broker: ~12 % of its goroutines' waits were in reserve).
func (d *dedupe) reserveBatch(keys []uint64, take []bool, order []int32) {
	var counts [dedupeShards + 1]int32
	for i, k := range keys {
		if take[i] {
			counts[k>>60+1]++
		}
	}
	for sh := 1; sh <= dedupeShards; sh++ {
		counts[sh] += counts[sh-1]
	}
	next := counts // each shard's next free position in order
	for i, k := range keys {
		if take[i] {
			order[next[k>>60]] = int32(i)
			next[k>>60]++
		}
	}
	for sh := range dedupeShards {
		from, to := counts[sh], counts[sh+1]
		if from == to {
			continue
		}
		s := &d.shards[sh]
		s.mu.Lock()
		for _, i := range order[from:to] {
			take[i] = d.reserveLocked(s, keys[i])
		}
		s.mu.Unlock()
	}
}

// reserveLocked is reserve with s, k's shard, locked.
func (d *dedupe) reserveLocked(s *dedupeShard, k uint64) bool {
	if s.set.has(k) {
		return false
	}
	if used := s.set.currentUsed(); used >= s.limit {
		s.set.rotate()
		s.rotated = d.now()
	} else if used&1023 == 0 {
		if now := d.now(); now.Sub(s.rotated) >= d.window/2 {
			s.set.rotate()
			s.rotated = now
		}
	}
	s.set.add(k)
	return true
}

// remember adds k, a hash of a message already stored, without the
// rotation checks of reserve: seeding fills the current generation from
// the log (seedDedupeLoop). It reports false when k's shard has no room
// left in that generation for seeded hashes (half of it, so that seeding
// never forces a rotation that would drop the hashes of live sends).
func (d *dedupe) remember(k uint64) bool {
	s := d.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.set.has(k) {
		return true
	}
	if s.set.currentUsed() >= s.limit/2 {
		return false
	}
	s.set.add(k)
	return true
}

// seedRoom is how many seeded hashes the table takes (remember): half a
// generation of every shard.
func (d *dedupe) seedRoom() int {
	if !d.on {
		return 0
	}
	return dedupeShards * (d.shards[0].limit / 2)
}

// release forgets k (its append failed).
func (d *dedupe) release(k uint64) {
	s := d.shard(k)
	s.mu.Lock()
	s.set.remove(k)
	s.mu.Unlock()
}

// generationSet is two generations of an open-addressing set of 64-bit
// hashes with linear probing, each sized for at most half full, in one
// array: slot i of generation g is element 2i+g, so a lookup, which checks
// both, reads one cache line where two separate tables would read two (a
// broker looks up every message it stores, and the line is seldom cached).
// Each generation keeps its own probe chains: 0 marks an empty slot and 1
// a removed one; keys are moved out of that range. rotate makes the current
// generation the previous one and clears the other for new keys.
//
//	slots: | g0[0] g1[0] | g0[1] g1[1] | g0[2] g1[2] | ... |  (8 bytes each)
type generationSet struct {
	slots []uint64
	mask  uint64 // slots per generation − 1
	cur   uint64 // the generation inserts go to: 0 or 1
	used  [2]int // filled slots per generation, removed ones included
}

// generationSlots returns the slots a generationSet needs for n keys per
// generation: two tables of the power of two at least 2n.
func generationSlots(n int) int {
	size := 1
	for size < 2*n {
		size <<= 1
	}
	return 2 * size
}

// newGenerationSet makes a set on zeroed slots (their number from
// generationSlots).
func newGenerationSet(slots []uint64) generationSet {
	return generationSet{slots: slots, mask: uint64(len(slots)/2 - 1)}
}

// has reports whether either generation holds k.
func (g *generationSet) has(k uint64) bool {
	k = fixKey(k)
	open0, open1 := true, true // the generations' probe chains go on
	for i := k & g.mask; open0 || open1; i = (i + 1) & g.mask {
		a, b := g.slots[2*i], g.slots[2*i+1]
		if a == k || b == k {
			return true
		}
		open0 = open0 && a != slotEmpty
		open1 = open1 && b != slotEmpty
	}
	return false
}

// add inserts k into the current generation.
func (g *generationSet) add(k uint64) {
	k = fixKey(k)
	for i := k & g.mask; ; i = (i + 1) & g.mask {
		at := 2*i + g.cur
		if s := g.slots[at]; s == slotEmpty || s == slotRemoved || s == k {
			if s == slotEmpty {
				g.used[g.cur]++
			}
			atomic.StoreUint64(&g.slots[at], k) // touch reads without the lock
			return
		}
	}
}

// remove takes k out of both generations.
func (g *generationSet) remove(k uint64) {
	k = fixKey(k)
	for gen := range uint64(2) {
		for i := k & g.mask; ; i = (i + 1) & g.mask {
			at := 2*i + gen
			if s := g.slots[at]; s == k {
				atomic.StoreUint64(&g.slots[at], slotRemoved)
				break
			} else if s == slotEmpty {
				break
			}
		}
	}
}

// currentUsed returns the current generation's filled slots.
func (g *generationSet) currentUsed() int { return g.used[g.cur] }

// rotate starts a new current generation, dropping the previous one.
func (g *generationSet) rotate() {
	g.cur ^= 1
	for i := g.cur; i < uint64(len(g.slots)); i += 2 {
		atomic.StoreUint64(&g.slots[i], slotEmpty)
	}
	g.used[g.cur] = 0
}

// Slot values with a meaning; keys are moved out of their range (fixKey).
const (
	slotEmpty   = 0
	slotRemoved = 1
)

func fixKey(k uint64) uint64 {
	if k <= slotRemoved {
		k += 2
	}
	return k
}

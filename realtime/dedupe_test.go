package realtime

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestDedupe_RemembersWithinWindow(t *testing.T) {
	now := time.Unix(0, 0)
	d := newDedupe(time.Minute, 1<<16, func() time.Time { return now })
	k := d.key([]byte("s"), []byte("id-1"), 0)
	if !d.reserve(k) || d.reserve(k) {
		t.Fatal("first reserve must succeed and the second fail")
	}
	if k2 := d.key([]byte("s"), []byte("id-1"), 1); !d.reserve(k2) {
		t.Fatal("another attempt of the same id is not a duplicate")
	}
	d.release(k)
	if !d.reserve(k) {
		t.Fatal("a released id is not remembered")
	}
	// Past the window (two rotations) the id is forgotten. Rotation is
	// checked every 1024 inserts into a shard: insert that many into k's.
	for step := range 2 {
		now = now.Add(31 * time.Second)
		for i := range 2048 {
			d.reserve(k&(0xF<<60) | uint64(step+1)<<40 | uint64(i+7))
		}
	}
	if !d.reserve(k) {
		t.Fatal("id still remembered after the window")
	}
}

func TestDedupe_CapacityBoundsMemory(t *testing.T) {
	d := newDedupe(time.Hour, 1024, time.Now)
	for i := range 100000 {
		d.reserve(uint64(i) * 0x9E3779B97F4A7C15)
	}
	for i := range d.shards {
		if n := len(d.shards[i].set.slots); n > 2*128 {
			t.Fatalf("shard table grew to %d slots", n)
		}
	}
	// The most recent ids are still remembered.
	last := 99999
	if d.reserve(uint64(last) * 0x9E3779B97F4A7C15) {
		t.Fatal("latest id forgotten")
	}
}

// Both generations answer has; add goes to the current one; rotate drops
// the previous one; remove takes a key out of either, even mid-chain.
func TestGenerationSet(t *testing.T) {
	g := newGenerationSet(make([]uint64, generationSlots(8)))
	first := []uint64{0, 1, 17, 1 << 63, 33, 49} // 17, 33, 49 share a home slot; 0, 1 become 2, 3
	for _, k := range first {
		g.add(k)
		if !g.has(k) {
			t.Fatalf("added %d but has() is false", k)
		}
	}
	g.remove(17)
	if g.has(17) || !g.has(33) || !g.has(49) || !g.has(1) {
		t.Fatal("remove broke a probe chain")
	}
	g.rotate()
	second := []uint64{5, 65, 81}
	for _, k := range second {
		g.add(k)
	}
	for _, k := range append(second, 0, 1, 33, 49) {
		if !g.has(k) {
			t.Fatalf("%d missing with two generations", k)
		}
	}
	if g.currentUsed() != 3 {
		t.Fatalf("current generation holds %d", g.currentUsed())
	}
	g.remove(33) // in the previous generation
	if g.has(33) || !g.has(49) {
		t.Fatal("remove from the previous generation")
	}
	g.rotate() // drops the first generation
	for _, k := range []uint64{0, 1, 1 << 63, 49} {
		if g.has(k) {
			t.Fatalf("%d outlived two rotations", k)
		}
	}
	for _, k := range second {
		if !g.has(k) {
			t.Fatalf("%d lost by one rotation", k)
		}
	}
}

func BenchmarkDedupeReserve(b *testing.B) {
	d := newDedupe(time.Hour, 4_000_000, time.Now)
	k := uint64(1)
	b.ReportAllocs()
	for b.Loop() {
		k = k*6364136223846793005 + 1442695040888963407
		d.reserve(k)
	}
}

// key hashes the same bytes the same whether they fit the stack buffer or
// not: a short key and a long one each equal the Hash fed piece by piece.
func TestDedupeKey_SameAsPieceByPiece(t *testing.T) {
	d := newDedupe(time.Minute, 1000, time.Now)
	for _, subject := range []string{"order.changed", strings.Repeat("s", 200)} {
		id := []byte("01JEXAMPLE0000000000000000")
		var h maphash.Hash
		h.SetSeed(d.seed)
		h.WriteString(subject)
		h.WriteByte(0)
		h.Write(id)
		h.WriteByte(1)
		h.WriteByte(2)
		if got, want := d.key([]byte(subject), id, 0x0102), h.Sum64(); got != want {
			t.Fatalf("subject of %d bytes: key %x, want %x", len(subject), got, want)
		}
	}
}

// reserveBatch answers each key as reserve would one by one, in order:
// new keys are taken, keys seen before (in an earlier batch or earlier in
// the same one) and keys not asked for are not.
func TestDedupe_ReserveBatchAsOneByOne(t *testing.T) {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	batched, single := newDedupe(time.Minute, 1<<12, clock), newDedupe(time.Minute, 1<<12, clock)
	k := uint64(12345)
	for round := range 40 {
		n := 1 + round*13%300
		keys, take := make([]uint64, n), make([]bool, n)
		want := make([]bool, n)
		for i := range keys {
			k = k*6364136223846793005 + 1442695040888963407
			keys[i] = k
			if i%7 == 3 && i > 0 {
				keys[i] = keys[i/2] // a duplicate within the batch
			}
			if i%11 == 5 && round > 0 {
				keys[i] = uint64(round) * 0x9E3779B97F4A7C15 // one of an earlier batch
			}
			take[i] = i%17 != 9 // some are not asked for (rejected messages)
			if take[i] {
				want[i] = single.reserve(keys[i])
			}
		}
		batched.reserveBatch(keys, take, make([]int32, n))
		for i := range take {
			if take[i] != want[i] {
				t.Fatalf("round %d, key %d: batch reserved %v, one by one %v", round, i, take[i], want[i])
			}
		}
		_ = batched.reserve(uint64(round+1) * 0x9E3779B97F4A7C15)
		_ = single.reserve(uint64(round+1) * 0x9E3779B97F4A7C15)
		now = now.Add(time.Second)
	}
}

var sink atomic.Uint64

// A send of 256 messages, two at once (two requests being checked on two
// processors): reserve per key against reserveBatch.
func BenchmarkDedupeReserve256(b *testing.B) {
	for _, batched := range []bool{false, true} {
		name := "each"
		if batched {
			name = "batch"
		}
		b.Run(name, func(b *testing.B) {
			d := newDedupe(time.Hour, 4_000_000, time.Now)
			var seed atomic.Uint64
			b.SetParallelism(1)
			b.RunParallel(func(pb *testing.PB) {
				k := seed.Add(1) << 32
				keys, take, order := make([]uint64, 256), make([]bool, 256), make([]int32, 256)
				for pb.Next() {
					var touched uint64
					for i := range keys {
						k = k*6364136223846793005 + 1442695040888963407
						keys[i], take[i] = k, true
						touched ^= d.touch(k) // as the send handler does
					}
					sink.Add(touched)
					if batched {
						d.reserveBatch(keys, take, order)
						continue
					}
					for _, k := range keys {
						d.reserve(k)
					}
				}
			})
		})
	}
}

package realtime

import (
	"math/rand/v2"
	"testing"
)

func TestPendingKeys_SettledByTheSlaveOffset(t *testing.T) {
	var p pendingKeys
	if p.pending(7, 0) {
		t.Fatal("an empty set holds a key")
	}
	p.add(7, 100, 0)
	p.add(0, 50, 0) // key 0 is kept as 1
	for _, c := range []struct {
		key     uint64
		settled int64
		want    bool
	}{{7, 0, true}, {7, 99, true}, {7, 100, false}, {8, 0, false}, {0, 49, true}, {1, 49, true}, {0, 50, false}} {
		if got := p.pending(c.key, c.settled); got != c.want {
			t.Errorf("pending(%d, settled %d) = %v, want %v", c.key, c.settled, got, c.want)
		}
	}
	// A key added again keeps the higher need, unless the first settled.
	p.add(7, 80, 0)
	if !p.pending(7, 90) {
		t.Fatal("a second add with a lower need lowered the first")
	}
	p.add(7, 300, 0)
	if !p.pending(7, 200) || p.pending(7, 300) {
		t.Fatal("a second add with a higher need did not raise it")
	}
	p.add(7, 150, 300) // settled, then stored again: the new need counts
	if p.pending(7, 150) || !p.pending(7, 149) {
		t.Fatal("a settled key added again does not wait for its new need")
	}
	// A cut lowers the slave's offset: settled keys may count again.
	if !p.pending(0, 10) {
		t.Fatal("a lower settled offset does not make the key pending again")
	}
}

// TestPendingKeys_AgainstAMap adds and checks many keys against a map while
// the slave's offset moves on (and now and then back), across rebuilds
// that grow and shrink the table; probe chains run over settled slots.
func TestPendingKeys_AgainstAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var p pendingKeys
	want := map[uint64]int64{}
	var settled, offset, everSettled int64
	keys := make([]uint64, 0, 1<<16)
	for round := range 400 {
		// A reply of up to 512 messages; some keys collide on purpose
		// (the low bits pick the slot).
		n := 1 + rng.IntN(512)
		if round > 200 && round < 260 {
			n = 4096 // a burst: the table grows
		}
		for range n {
			k := rng.Uint64()
			switch rng.IntN(8) {
			case 0:
				k &= 0xffff // crowded slots
			case 1:
				if len(keys) > 0 {
					k = keys[rng.IntN(len(keys))] // a resent message
				}
			}
			offset += 300
			p.add(k, offset, settled)
			kk := max(k, 1)
			if need, ok := want[kk]; !ok || need <= settled || offset > need {
				want[kk] = offset
			}
			keys = append(keys, k)
		}
		// The slave acknowledges most of it; sometimes a cut lowers it.
		switch {
		case rng.IntN(20) == 0:
			settled = max(settled-int64(rng.IntN(3000)), 0)
		case round < 200 || round >= 300:
			settled = offset - int64(rng.IntN(20000))
		}
		everSettled = max(everSettled, settled)
		for range 200 {
			var k uint64
			if rng.IntN(2) == 0 && len(keys) > 0 {
				k = keys[rng.IntN(len(keys))]
			} else {
				k = rng.Uint64()
			}
			kk := max(k, 1)
			need, ok := want[kk]
			if ok && need > settled && need <= everSettled {
				continue // settled once, then a cut: either answer is safe
			}
			if got, exp := p.pending(k, settled), ok && need > settled; got != exp {
				t.Fatalf("round %d: pending(%#x, settled %d) = %v, want %v (need %d)", round, k, settled, got, exp, need)
			}
		}
		if len(keys) > 1<<15 {
			keys = keys[len(keys)/2:]
		}
	}
	live := 0
	for _, need := range want {
		if need > settled {
			live++
		}
	}
	if got := p.len(settled); got > live {
		t.Fatalf("%d keys pending in the table, at most %d expected", got, live)
	}
	size := func() int { return len(p.cur.slots) + len(p.prev.slots) }
	big := size()
	if big <= 2*minPendingSlots {
		t.Fatalf("tables of %d slots after a burst of 240,000 keys: they did not grow", big)
	}
	p.shrink(settled)
	if live > 0 && size() != big {
		t.Fatalf("shrink dropped tables holding %d pending keys", live)
	}
	p.shrink(offset)
	if size() != 0 || p.pending(keys[0], 0) {
		t.Fatalf("shrink kept tables of %d slots with nothing pending", size())
	}
	p.add(keys[0], offset+1, offset)
	if !p.pending(keys[0], offset) {
		t.Fatal("no key kept after a shrink")
	}
}

func BenchmarkPendingKeys_Add(b *testing.B) {
	var p pendingKeys
	rng := rand.New(rand.NewPCG(3, 4))
	var offset int64
	for i := 0; b.Loop(); i++ {
		offset += 300
		// 16 replies of 256 messages in flight: the slave is 4096 behind.
		p.add(rng.Uint64(), offset, offset-4096*300)
	}
}

func BenchmarkPendingKeys_MapAddDelete(b *testing.B) {
	m := map[uint64]int64{}
	rng := rand.New(rand.NewPCG(3, 4))
	ring := make([]uint64, 4096)
	var offset int64
	for i := 0; b.Loop(); i++ {
		offset += 300
		k := rng.Uint64()
		m[k] = offset
		j := i & 4095
		delete(m, ring[j])
		ring[j] = k
	}
}

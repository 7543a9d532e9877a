package msgid

import (
	"encoding/binary"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"
)

func TestNext_SortedAndUnique(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	g := New(func() time.Time { return now })
	ids := make([]string, 0, 10000)
	for i := range 10000 {
		if i%1000 == 0 {
			now = now.Add(time.Millisecond)
		}
		if i == 5000 {
			now = now.Add(-time.Second) // a clock step back keeps order
		}
		ids = append(ids, g.Next())
	}
	if !sort.StringsAreSorted(ids) {
		t.Fatal("ids from one generator are not sorted")
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if len(id) != Size || seen[id] {
			t.Fatalf("bad or duplicate id %q", id)
		}
		seen[id] = true
	}
}

func TestNext_ConcurrentUnique(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				id := Next()
				mu.Lock()
				if seen[id] {
					t.Errorf("duplicate %s", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func TestTime(t *testing.T) {
	at := time.UnixMilli(1_800_000_000_123)
	g := New(func() time.Time { return at })
	got, ok := Time(g.Next())
	if !ok || !got.Equal(at) {
		t.Fatalf("Time = %v %v, want %v", got, ok, at)
	}
	if _, ok := Time("not-an-id"); ok {
		t.Fatal("Time accepted garbage")
	}
}

func BenchmarkNext(b *testing.B) {
	g := New(nil)
	buf := make([]byte, 0, Size)
	b.ReportAllocs()
	for b.Loop() {
		buf = g.AppendNext(buf[:0])
	}
}

// appendBase32 matches the plain digit-by-digit encoding of the 130-bit
// number (2 zero bits, then the 128).
func TestAppendBase32_MatchesDigitByDigit(t *testing.T) {
	ref := func(raw [16]byte) string {
		hi := binary.BigEndian.Uint64(raw[0:8])
		lo := binary.BigEndian.Uint64(raw[8:16])
		var out [Size]byte
		for i := Size - 1; i >= 0; i-- {
			out[i] = alphabet[lo&31]
			lo = lo>>5 | hi<<59
			hi >>= 5
		}
		return string(out[:])
	}
	cases := [][16]byte{{}, {0: 0xff, 1: 0xff, 2: 0xff, 3: 0xff, 4: 0xff, 5: 0xff, 6: 0xff, 7: 0xff, 8: 0xff, 9: 0xff, 10: 0xff, 11: 0xff, 12: 0xff, 13: 0xff, 14: 0xff, 15: 0xff}}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		var raw [16]byte
		binary.BigEndian.PutUint64(raw[0:8], r.Uint64())
		binary.BigEndian.PutUint64(raw[8:16], r.Uint64())
		cases = append(cases, raw)
	}
	for i := 0; i < 128; i++ { // each single bit
		var raw [16]byte
		raw[i/8] = 0x80 >> (i % 8)
		cases = append(cases, raw)
	}
	for _, raw := range cases {
		if got, want := string(appendBase32(nil, raw)), ref(raw); got != want {
			t.Fatalf("%x: %s, want %s", raw, got, want)
		}
	}
}

func BenchmarkAppendBase32(b *testing.B) {
	raw := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	buf := make([]byte, 0, Size)
	for i := 0; i < b.N; i++ {
		buf = appendBase32(buf[:0], raw)
	}
}

func TestAppendNextN_OrderedAndUnique(t *testing.T) {
	g := New(nil)
	now := time.Now()
	b := g.AppendNextN(nil, now, 100)
	b = g.AppendNextN(b, now, 3)
	b = append(b, g.NextAt(now)...)
	if len(b) != 104*Size {
		t.Fatalf("%d bytes, want %d", len(b), 104*Size)
	}
	prev := ""
	for i := 0; i < 104; i++ {
		id := string(b[i*Size : (i+1)*Size])
		if id <= prev {
			t.Fatalf("id %d %s not after %s", i, id, prev)
		}
		if at, ok := Time(id); !ok || at.UnixMilli() != now.UnixMilli() {
			t.Fatalf("id %d %s: time %v %v, want %v", i, id, at, ok, now)
		}
		prev = id
	}
}

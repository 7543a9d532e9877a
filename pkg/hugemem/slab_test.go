package hugemem

import (
	"sync"
	"testing"
	"time"
	"unsafe"
)

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// Slots are disjoint, empty, of the slab's size, and a slot given back is
// handed out again before the slab makes another chunk.
func TestSlab_SlotsAreDisjointAndReused(t *testing.T) {
	const size = 1000
	s := NewSlab(size, 64*size)
	seen := map[uintptr]bool{}
	var slots [][]byte
	for range 200 { // over three chunks
		b := s.Get()
		if len(b) != 0 || cap(b) != size {
			t.Fatalf("slot len %d cap %d, want 0 and %d", len(b), cap(b), size)
		}
		for other := range seen {
			if d := int64(addr(b)) - int64(other); d > -size && d < size {
				t.Fatalf("slots at %#x and %#x overlap", addr(b), other)
			}
		}
		seen[addr(b)] = true
		slots = append(slots, b)
	}
	st := s.Stats()
	spare := int64(0)
	if st.Spare { // made ahead, late for the fourth chunk
		spare = 1
	}
	if st.Chunks != 4 || st.SlotsInUse != 200 || st.BytesInUse != 200*size || st.Bytes != (4+spare)*64*size {
		t.Fatalf("Stats = %+v; want 4 chunks of 64 slots, 200 in use", st)
	}
	given := slots[70]
	if !s.Put(given[:17]) { // any length
		t.Fatal("Put of a slot reported false")
	}
	if again := s.Get(); addr(again) != addr(given) {
		t.Fatalf("Get after Put returned %#x, want the slot given back %#x", addr(again), addr(given))
	}
	if st := s.Stats(); st.Chunks != 4 {
		t.Fatalf("%d chunks after reusing a slot, want 4", st.Chunks)
	}
}

// Put takes back only what Get handed out, once.
func TestSlab_PutRejectsWhatItDidNotHandOut(t *testing.T) {
	const size = 512
	s := NewSlab(size, 8*size)
	b := s.Get()
	cases := map[string][]byte{
		"from make":         make([]byte, 0, size),
		"other capacity":    b[: 0 : size-1],
		"middle of a slot":  b[8:8:size],
		"nil":               nil,
		"from another slab": NewSlab(size, 8*size).Get(),
	}
	for name, c := range cases {
		if s.Put(c) {
			t.Errorf("Put(%s) = true", name)
		}
	}
	if !s.Put(b) {
		t.Fatal("Put of a slot = false")
	}
	if s.Put(b) {
		t.Fatal("second Put of the same slot = true")
	}
	if st := s.Stats(); st.SlotsInUse != 0 {
		t.Fatalf("%d slots in use, want 0", st.SlotsInUse)
	}
}

// Goroutines taking and giving back slots never share one.
func TestSlab_ConcurrentUseNeverSharesASlot(t *testing.T) {
	const size = 256
	s := NewSlab(size, 32*size)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var held [][]byte
			for i := range 2000 {
				b := s.Get()[:size]
				for j := range b {
					b[j] = byte(g)
				}
				held = append(held, b)
				if i%3 == 2 {
					for _, h := range held {
						for j := range h {
							if h[j] != byte(g) {
								t.Errorf("goroutine %d found byte %d in its slot", g, h[j])
								return
							}
						}
						s.Put(h)
					}
					held = held[:0]
				}
			}
			for _, h := range held {
				s.Put(h)
			}
		}()
	}
	wg.Wait()
	if st := s.Stats(); st.SlotsInUse != 0 {
		t.Fatalf("%d slots in use after every goroutine gave its back", st.SlotsInUse)
	}
}

func TestNewSlab_PanicsOnZeroSize(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NewSlab(0, 0) did not panic")
		}
	}()
	NewSlab(0, 0)
}

func TestUint64s_AlignedAndZeroed(t *testing.T) {
	for _, n := range []int{10, PageSize / 8, PageSize/8*3 + 5} {
		w := Uint64s(n)
		if len(w) != n || cap(w) != n {
			t.Fatalf("Uint64s(%d): len %d cap %d", n, len(w), cap(w))
		}
		for i, v := range w {
			if v != 0 {
				t.Fatalf("Uint64s(%d)[%d] = %d", n, i, v)
			}
		}
		if n*8 >= PageSize && uintptr(unsafe.Pointer(&w[0]))%PageSize != 0 {
			t.Fatalf("Uint64s(%d) at %p, not on a huge-page boundary", n, &w[0])
		}
	}
}

// Once the last chunk is half used the slab makes the next one ahead, and
// the Get that finds every chunk full takes it; a slab that never fills
// half a chunk makes none.
func TestSlab_MakesTheNextChunkAhead(t *testing.T) {
	const size = 1000
	s := NewSlab(size, 64*size)
	for range 31 {
		s.Get()
	}
	time.Sleep(10 * time.Millisecond) // a spare made now would be a defect
	if st := s.Stats(); st.Spare {
		t.Fatalf("spare made with 31 of 64 slots used: %+v", st)
	}
	s.Get()
	waitSpare(t, s)
	for range 33 { // the first chunk's last 32, and one of the spare
		s.Get()
	}
	if st := s.Stats(); st.Chunks != 2 || st.Spare {
		t.Fatalf("after the first chunk filled: %+v, want 2 chunks, the spare taken", st)
	}
	for range 31 { // half of the second
		s.Get()
	}
	waitSpare(t, s)
}

func waitSpare(t *testing.T, s *Slab) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !s.Stats().Spare {
		if time.Now().After(deadline) {
			t.Fatalf("no spare chunk 5 s after the last chunk was half used: %+v", s.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

package timewheel

import (
	"math/rand"
	"reflect"
	"sort"
	"testing"
	"time"
	"unsafe"
)

// compact is a pointer-free value of 12 bytes, like the delay store's.
type compact struct{ a, b, c uint32 }

func TestSlot_EntryIsTheValuePlusFourBytes(t *testing.T) {
	if got := unsafe.Sizeof(entry[compact]{}); got != 16 {
		t.Fatalf("entry[compact] is %d bytes, want 16", got)
	}
}

func TestHasPointers(t *testing.T) {
	for _, c := range []struct {
		t    reflect.Type
		want bool
	}{
		{reflect.TypeFor[int](), false}, {reflect.TypeFor[compact](), false}, {reflect.TypeFor[[4]int64](), false},
		{reflect.TypeFor[struct{ x [2]compact }](), false}, {reflect.TypeFor[[0]*int](), false},
		{reflect.TypeFor[string](), true}, {reflect.TypeFor[[]byte](), true}, {reflect.TypeFor[*compact](), true},
		{reflect.TypeFor[struct{ s string }](), true}, {reflect.TypeFor[[1]*int](), true},
		{reflect.TypeFor[map[int]int](), true}, {reflect.TypeFor[any](), true},
	} {
		if got := hasPointers(c.t); got != c.want {
			t.Errorf("hasPointers(%v) = %v, want %v", c.t, got, c.want)
		}
	}
}

// TestSlot_MappedSlotsKeepOrder fills a few slots far past a page, fires
// part of them, adds more (the array moves while entries have fired) and
// checks the order against a sorted reference; the slots were mapped and
// emptied slots give their mapping back.
func TestSlot_MappedSlotsKeepOrder(t *testing.T) {
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	w, err := New[compact](500*time.Millisecond, 16, 0)
	if err != nil {
		t.Fatal(err)
	}
	var want []int64
	add := func(n int, from, span int64) {
		for range n {
			due := from + rng.Int63n(span)
			w.Add(due, compact{a: uint32(due)})
			want = append(want, due)
		}
	}
	add(20_000, 0, 2000) // four ticks, 5,000 entries each
	mapped := 0
	for i := range w.slots {
		if w.slots[i].region != nil {
			mapped++
		}
	}
	if mapped != 4 {
		t.Fatalf("seed %d: %d slots mapped, want 4", seed, mapped)
	}
	var got []int64
	collect := func(due int64, v compact) {
		if uint32(due) != v.a {
			t.Fatalf("seed %d: entry due %d carries %d", seed, due, v.a)
		}
		got = append(got, due)
	}
	w.Expire(700, 0, collect)
	add(20_000, 700, 1300) // into the slots being fired
	w.Expire(5000, 0, collect)
	sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
	if len(got) != len(want) {
		t.Fatalf("seed %d: fired %d, want %d", seed, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("seed %d: entry %d due %d, want %d", seed, i, got[i], want[i])
		}
	}
	for i := range w.slots {
		if w.slots[i].region != nil || w.slots[i].entries != nil {
			t.Fatalf("slot %d keeps its array after emptying", i)
		}
	}
}

func TestSlot_PointerValuesStayOnTheGoHeap(t *testing.T) {
	w, err := New[string](500*time.Millisecond, 16, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10_000 {
		w.Add(int64(i%400), "x")
	}
	for i := range w.slots {
		if w.slots[i].region != nil {
			t.Fatalf("slot %d of strings is mapped", i)
		}
	}
	if n := w.Expire(400, 0, func(int64, string) {}); n != 10_000 {
		t.Fatalf("expired %d", n)
	}
}

func TestWheel_FreeEmpties(t *testing.T) {
	w, err := New[compact](500*time.Millisecond, 16, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5000 {
		w.Add(int64(10_000+i%300), compact{})
		w.Add(int64(i), compact{})           // late
		w.Add(int64(1_000_000+i), compact{}) // overflow
	}
	w.Free()
	if w.Len() != 0 {
		t.Fatalf("Len = %d after Free", w.Len())
	}
	if _, ok := w.NextDue(); ok {
		t.Fatal("NextDue after Free")
	}
	w.Add(10_100, compact{a: 7})
	var got []compact
	w.Expire(20_000, 0, func(_ int64, v compact) { got = append(got, v) })
	if len(got) != 1 || got[0].a != 7 {
		t.Fatalf("after Free: got %v", got)
	}
}

package timewheel

import (
	"math/rand"
	"os"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
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
// checks the order against a sorted reference; the chunks were mapped and
// all of them are back in the pool once the slots are empty.
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
		for _, c := range w.slots[i].chunks {
			if !w.pool.inArena(c) {
				t.Fatalf("slot %d has a chunk outside the arenas", i)
			}
			mapped++
		}
	}
	chunks := 0
	for i := range w.slots {
		chunks += (w.slots[i].n + w.pool.size - 1) / w.pool.size
	}
	if mapped != chunks || w.pool.size != 256 {
		t.Fatalf("seed %d: %d chunks of %d entries in use, want %d of 256", seed, mapped, w.pool.size, chunks)
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
		if len(w.slots[i].chunks) != 0 {
			t.Fatalf("slot %d keeps its chunks after emptying", i)
		}
	}
	if back, all := len(w.pool.free)+len(w.pool.dropped), len(w.pool.arenas)*arenaBytes/chunkBytes; back != all || w.pool.inUse != 0 {
		t.Fatalf("%d chunks back in the pool, want all %d (%d in use)", back, all, w.pool.inUse)
	}
	if len(w.pool.free) > keepChunks {
		t.Fatalf("%d free chunks resident, want at most %d", len(w.pool.free), keepChunks)
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
	if len(w.pool.arenas) != 0 {
		t.Fatal("a wheel of strings maps memory")
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

// TestSlot_MemoryPerEntry loads pointer-free entries as the delay store
// does (500 ms ticks, 2 million due within 10 minutes: 1,666 a slot) and
// checks they cost the Go heap next to nothing and the process about their
// 16 bytes each (a slot leaves at most the rest of one page unwritten), and
// that Free gives the memory back.
func TestSlot_MemoryPerEntry(t *testing.T) {
	n, span := 2_000_000, int64(10*60*1000)
	if testing.Short() {
		n, span = 600_000, 3*60*1000
	}
	w, err := New[compact](500*time.Millisecond, 7201, 0)
	if err != nil {
		t.Fatal(err)
	}
	heap0, rss0 := heapInUse(), residentBytes(t)
	rng := rand.New(rand.NewSource(1))
	for i := range n {
		w.Add(1000+rng.Int63n(span), compact{a: uint32(i)})
	}
	heap1, rss1 := heapInUse(), residentBytes(t)
	perHeap := float64(heap1-heap0) / float64(n)
	perRSS := float64(rss1-rss0) / float64(n)
	t.Logf("%d entries: Go heap %+.2f B/entry, resident %+.2f B/entry", n, perHeap, perRSS)
	if perHeap > 1 {
		t.Errorf("the Go heap grew by %.2f B an entry, want the slots outside it", perHeap)
	}
	if perRSS > 20 {
		t.Errorf("resident memory grew by %.2f B an entry, want about 16", perRSS)
	}
	w.Free()
	if rss2 := residentBytes(t); rss2-rss0 > int64(n)*2 {
		t.Errorf("after Free %d bytes are still resident of %d", rss2-rss0, rss1-rss0)
	}
}

func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// residentBytes reads VmRSS from /proc/self/status.
func residentBytes(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Skip("no VmRSS")
	return 0
}

// TestSlot_LongTickSortsAcrossChunks covers the comparison sort a slot
// spanning chunks gets when its tick is too long to count offsets cheaply.
func TestSlot_LongTickSortsAcrossChunks(t *testing.T) {
	for _, tick := range []time.Duration{time.Minute, 2 * time.Minute} { // too sparse to count; too long a tick
		w, err := New[compact](tick, 4, 0)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewSource(2))
		want := make([]int64, 0, 2000)
		for range 2000 {
			due := rng.Int63n(tick.Milliseconds())
			w.Add(due, compact{a: uint32(due)})
			want = append(want, due)
		}
		sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
		var got []int64
		w.Expire(tick.Milliseconds(), 0, func(due int64, v compact) {
			if uint32(due) != v.a {
				t.Fatalf("tick %v: entry due %d carries %d", tick, due, v.a)
			}
			got = append(got, due)
		})
		if len(got) != len(want) {
			t.Fatalf("tick %v: fired %d of %d", tick, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("tick %v: entry %d due %d, want %d", tick, i, got[i], want[i])
			}
		}
	}
}

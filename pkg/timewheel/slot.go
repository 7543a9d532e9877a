package timewheel

import (
	"slices"
	"sort"
)

// entry is what a slot keeps per value: its due time as an offset from the
// start of the slot's tick (a slot only holds entries of one tick), so an
// entry costs 4 bytes besides T (plus T's alignment padding).
type entry[T any] struct {
	offset uint32
	value  T
}

// slot holds the entries of one tick in a row of fixed-size chunks from
// the wheel's pool (chunks.go): adding never copies, a slot wastes at most
// the unwritten part of its last chunk (pages never written are not
// resident), and chunks whose entries have all fired go back to the pool
// while the rest of the slot fires.
type slot[T any] struct {
	chunks [][]entry[T]
	head   int  // entries [0, head) of the chunks have fired
	n      int  // entries [0, n) of the chunks are written
	sorted bool // entries [head, n) are in due order
}

// at returns entry i of s; shift is the pool's chunk size as a power of two.
func (s *slot[T]) at(i int, shift uint) *entry[T] {
	return &s.chunks[i>>shift][i&(1<<shift-1)]
}

func (w *Wheel[T]) push(s *slot[T], e entry[T]) {
	if s.n == len(s.chunks)<<w.pool.shift {
		s.chunks = append(s.chunks, w.pool.get())
	}
	if s.sorted && s.n > s.head && e.offset < s.at(s.n-1, w.pool.shift).offset {
		s.sorted = false
	}
	*s.at(s.n, w.pool.shift) = e
	s.n++
}

// pop removes and returns the slot's first entry; the slot must hold one.
func (w *Wheel[T]) pop(s *slot[T]) entry[T] {
	p := s.at(s.head, w.pool.shift)
	e := *p
	*p = entry[T]{} // drop references held by value
	s.head++
	switch {
	case s.head == s.n:
		w.reset(s)
	case s.head == w.pool.size:
		w.pool.put(s.chunks[0])
		s.chunks[0] = nil
		s.chunks = s.chunks[1:]
		s.head -= w.pool.size
		s.n -= w.pool.size
	}
	return e
}

// first returns the slot's first entry, sorting the slot if needed.
func (w *Wheel[T]) first(s *slot[T]) *entry[T] {
	if !s.sorted {
		switch live := s.n - s.head; {
		case s.n <= w.pool.size:
			slices.SortFunc(s.chunks[0][s.head:s.n], compareEntries[T])
		case w.tick <= maxCountingTick && int64(live) >= w.tick/4:
			w.countingSort(s)
		default:
			sort.Sort(chunkedEntries[T]{s: s, shift: w.pool.shift})
		}
		s.sorted = true
	}
	return s.at(s.head, w.pool.shift)
}

// maxCountingTick is the longest tick (ms) for which slots that span
// chunks are sorted by counting their entries' offsets.
const maxCountingTick = 1 << 16

// countingSort sorts s's unfired entries into new chunks by counting
// their offsets (a slot holds one tick: at most w.tick of them), keeping
// entries with the same due time in the order they were added, and gives
// the old chunks back: O(entries + tick), where a comparison sort of a
// slot holding a burst costs a multiple of that.
func (w *Wheel[T]) countingSort(s *slot[T]) {
	if len(w.counts) < int(w.tick)+1 {
		w.counts = make([]int32, w.tick+1)
	}
	counts := w.counts[:w.tick+1]
	clear(counts)
	for i := s.head; i < s.n; i++ {
		counts[s.at(i, w.pool.shift).offset+1]++
	}
	for k := 1; k < len(counts); k++ {
		counts[k] += counts[k-1]
	}
	live := s.n - s.head
	sorted := make([][]entry[T], (live+w.pool.size-1)>>w.pool.shift)
	for i := range sorted {
		sorted[i] = w.pool.get()
	}
	mask := w.pool.size - 1
	for i := s.head; i < s.n; i++ {
		e := s.at(i, w.pool.shift)
		pos := counts[e.offset]
		counts[e.offset]++
		sorted[pos>>w.pool.shift][int(pos)&mask] = *e
	}
	for i, c := range s.chunks {
		w.pool.put(c)
		s.chunks[i] = nil
	}
	s.chunks, s.head, s.n = sorted, 0, live
}

func compareEntries[T any](a, b entry[T]) int { return int(int64(a.offset) - int64(b.offset)) }

// chunkedEntries sorts a slot's unfired entries across its chunks.
type chunkedEntries[T any] struct {
	s     *slot[T]
	shift uint
}

func (c chunkedEntries[T]) Len() int { return c.s.n - c.s.head }
func (c chunkedEntries[T]) Less(i, j int) bool {
	return c.s.at(c.s.head+i, c.shift).offset < c.s.at(c.s.head+j, c.shift).offset
}
func (c chunkedEntries[T]) Swap(i, j int) {
	a, b := c.s.at(c.s.head+i, c.shift), c.s.at(c.s.head+j, c.shift)
	*a, *b = *b, *a
}

// reset empties the slot, giving its chunks back to the pool.
func (w *Wheel[T]) reset(s *slot[T]) {
	for i, c := range s.chunks {
		w.pool.put(c)
		s.chunks[i] = nil
	}
	if cap(s.chunks) > 64 {
		s.chunks = nil
	} else {
		s.chunks = s.chunks[:0]
	}
	s.head, s.n = 0, 0
	s.sorted = true
}

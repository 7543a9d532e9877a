package timewheel

import (
	"slices"
	"unsafe"
)

// entry is what a slot keeps per value: its due time as an offset from the
// start of the slot's tick (a slot only holds entries of one tick), so an
// entry costs 4 bytes besides T (plus T's alignment padding).
type entry[T any] struct {
	offset uint32
	value  T
}

// slot holds the entries of one tick. Its array grows by doubling; once it
// outgrows mappedFrom bytes and T holds no pointers, the array lives in
// anonymous mapped memory (memory.go) instead of the Go heap: the garbage
// collector neither scans nor doubles it, only the pages written count
// towards the process's memory, and an emptied slot returns them at once.
type slot[T any] struct {
	entries []entry[T]
	region  []byte // the mapping backing entries; nil when on the Go heap
	head    int    // entries[:head] have fired
	sorted  bool   // entries[head:] are in due order
}

// mappedFrom is the array size, in bytes, from which a slot's entries are
// mapped (when T allows): one page, so that the at most few thousand slots
// that each hold a handful of entries stay on the Go heap.
const mappedFrom = 4096

// releaseCap is the capacity above which an emptied slot on the Go heap
// drops its array.
const releaseCap = 4096

func (w *Wheel[T]) push(s *slot[T], e entry[T]) {
	if len(s.entries) == cap(s.entries) {
		w.grow(s)
	}
	if s.sorted && len(s.entries) > s.head && e.offset < s.entries[len(s.entries)-1].offset {
		s.sorted = false
	}
	s.entries = append(s.entries, e)
}

// grow doubles s's capacity, dropping the entries that have fired.
func (w *Wheel[T]) grow(s *slot[T]) {
	live := s.entries[s.head:]
	newCap := max(2*len(live), 8)
	var next []entry[T]
	var region []byte
	if w.mapped && newCap*w.entrySize > mappedFrom {
		if b, err := mapMemory(newCap * w.entrySize); err == nil {
			region = b
			next = unsafe.Slice((*entry[T])(unsafe.Pointer(unsafe.SliceData(b))), newCap)[:0]
		}
	}
	if next == nil {
		next = make([]entry[T], 0, newCap) // not mapped, or mapping failed
	}
	next = append(next, live...)
	sorted := s.sorted
	s.release()
	s.entries, s.region, s.sorted = next, region, sorted
}

func (s *slot[T]) sort() {
	if s.sorted {
		return
	}
	slices.SortFunc(s.entries[s.head:], func(a, b entry[T]) int { return int(int64(a.offset) - int64(b.offset)) })
	s.sorted = true
}

// reset empties the slot after its last entry fired.
func (s *slot[T]) reset() {
	if s.region != nil || cap(s.entries) > releaseCap {
		s.release()
		return
	}
	s.entries = s.entries[:0]
	s.head = 0
	s.sorted = true
}

// release drops the slot's array (unmapping it when mapped).
func (s *slot[T]) release() {
	if s.region != nil {
		unmapMemory(s.region)
	}
	s.entries, s.region = nil, nil
	s.head = 0
	s.sorted = true
}

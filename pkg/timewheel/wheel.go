package timewheel

import (
	"fmt"
	"sort"
	"time"
)

// Wheel is a hashed timing wheel of values of type T keyed by due time in
// Unix milliseconds.
type Wheel[T any] struct {
	tick     int64 // milliseconds per tick
	mask     int64
	slots    []slot[T]
	cur      int64 // lowest tick that may still hold entries
	count    int
	overflow overflowHeap[T] // entries due a rotation or more ahead
}

type item[T any] struct {
	due   int64
	value T
}

type slot[T any] struct {
	items  []item[T]
	head   int  // items[:head] have fired
	sorted bool // items[head:] are in due order
}

// releaseCap is the capacity above which an emptied slot drops its slice.
const releaseCap = 4096

// New returns a wheel of tick granularity with at least slots slots (rounded
// up to a power of two), whose current tick holds now (Unix milliseconds).
func New[T any](tick time.Duration, slots int, now int64) (*Wheel[T], error) {
	if tick < time.Millisecond {
		return nil, fmt.Errorf("timewheel: tick must be at least 1ms, got %v", tick)
	}
	if slots < 1 || slots > 1<<24 {
		return nil, fmt.Errorf("timewheel: slots must be in 1..%d, got %d", 1<<24, slots)
	}
	n := 1
	for n < slots {
		n <<= 1
	}
	w := &Wheel[T]{tick: tick.Milliseconds(), mask: int64(n - 1), slots: make([]slot[T], n)}
	for i := range w.slots {
		w.slots[i].sorted = true
	}
	w.cur = w.tickOf(now)
	return w, nil
}

// Len returns the number of entries in the wheel.
func (w *Wheel[T]) Len() int { return w.count }

// Slots returns the number of slots.
func (w *Wheel[T]) Slots() int { return len(w.slots) }

func (w *Wheel[T]) tickOf(ms int64) int64 {
	t := ms / w.tick
	if ms < 0 && ms%w.tick != 0 {
		t--
	}
	return t
}

// Add schedules value to fire at due (Unix milliseconds). A due time in the
// past fires at the next Expire.
func (w *Wheel[T]) Add(due int64, value T) {
	w.count++
	w.place(item[T]{due: due, value: value})
}

func (w *Wheel[T]) place(it item[T]) {
	t := w.tickOf(it.due)
	if t < w.cur {
		t = w.cur
	}
	if t-w.cur >= int64(len(w.slots)) {
		w.overflow.push(it)
		return
	}
	s := &w.slots[t&w.mask]
	if s.sorted && len(s.items) > s.head && it.due < s.items[len(s.items)-1].due {
		s.sorted = false
	}
	s.items = append(s.items, it)
}

// Expire calls fn, in due-time order, for entries whose due time is <= now
// and removes them, stopping after max entries when max > 0. It returns the
// number of entries expired. A clock that went back since the last call
// fires nothing that is not due at now.
func (w *Wheel[T]) Expire(now int64, max int, fn func(due int64, value T)) int {
	if w.count == 0 {
		if nt := w.tickOf(now); nt > w.cur {
			w.cur = nt
		}
		return 0
	}
	nowTick := w.tickOf(now)
	start := w.cur
	last := nowTick
	if last < start {
		last = start
	}
	if rotationEnd := start + int64(len(w.slots)) - 1; last > rotationEnd {
		last = rotationEnd
	}
	n := 0
	for t := start; t <= last; t++ {
		s := &w.slots[t&w.mask]
		s.sort()
		for s.head < len(s.items) && s.items[s.head].due <= now {
			if max > 0 && n >= max {
				w.cur = t
				return n
			}
			it := s.items[s.head]
			s.items[s.head] = item[T]{} // drop references held by value
			s.head++
			w.count--
			n++
			fn(it.due, it.value)
		}
		if s.head == len(s.items) {
			s.reset()
		}
	}
	// Every slot of the rotation has been visited when the clock jumped a
	// rotation or more; then due overflow entries come next in order.
	if nowTick-start >= int64(len(w.slots)) {
		w.cur = start + int64(len(w.slots)) - 1
		for w.overflow.len() > 0 && w.overflow.min().due <= now {
			if max > 0 && n >= max {
				w.migrate()
				return n
			}
			it := w.overflow.pop()
			w.count--
			n++
			fn(it.due, it.value)
		}
	}
	if nowTick > w.cur {
		w.cur = nowTick
	}
	w.migrate()
	return n
}

// migrate moves overflow entries that now fall within one rotation into
// their slots.
func (w *Wheel[T]) migrate() {
	limit := w.cur + int64(len(w.slots))
	for w.overflow.len() > 0 && w.tickOf(w.overflow.min().due) < limit {
		w.place(w.overflow.pop())
	}
}

// NextDue returns the earliest due time in the wheel, or false when it is
// empty.
func (w *Wheel[T]) NextDue() (int64, bool) {
	if w.count == 0 {
		return 0, false
	}
	for t := w.cur; t < w.cur+int64(len(w.slots)); t++ {
		s := &w.slots[t&w.mask]
		if s.head < len(s.items) {
			s.sort()
			return s.items[s.head].due, true
		}
	}
	if w.overflow.len() > 0 {
		return w.overflow.min().due, true
	}
	return 0, false
}

func (s *slot[T]) sort() {
	if s.sorted {
		return
	}
	rest := s.items[s.head:]
	sort.Slice(rest, func(i, j int) bool { return rest[i].due < rest[j].due })
	s.sorted = true
}

func (s *slot[T]) reset() {
	if cap(s.items) > releaseCap {
		s.items = nil
	} else {
		s.items = s.items[:0]
	}
	s.head = 0
	s.sorted = true
}

// overflowHeap is a binary min-heap by due time.
type overflowHeap[T any] struct{ items []item[T] }

func (h *overflowHeap[T]) len() int     { return len(h.items) }
func (h *overflowHeap[T]) min() item[T] { return h.items[0] }

func (h *overflowHeap[T]) push(it item[T]) {
	h.items = append(h.items, it)
	i := len(h.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h.items[p].due <= h.items[i].due {
			break
		}
		h.items[p], h.items[i] = h.items[i], h.items[p]
		i = p
	}
}

func (h *overflowHeap[T]) pop() item[T] {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items[last] = item[T]{}
	h.items = h.items[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h.items) && h.items[l].due < h.items[m].due {
			m = l
		}
		if r < len(h.items) && h.items[r].due < h.items[m].due {
			m = r
		}
		if m == i {
			break
		}
		h.items[m], h.items[i] = h.items[i], h.items[m]
		i = m
	}
	if len(h.items) == 0 {
		h.items = nil
	}
	return top
}

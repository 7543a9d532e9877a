package timewheel

import (
	"fmt"
	"math"
	"reflect"
	"time"
)

// Wheel is a hashed timing wheel of values of type T keyed by due time in
// Unix milliseconds.
type Wheel[T any] struct {
	tick     int64 // milliseconds per tick
	mask     int64
	slots    []slot[T]
	cur      int64 // lowest tick that may still hold entries in a slot
	count    int
	late     minHeap[T]   // entries whose tick had passed (< cur) when added
	overflow minHeap[T]   // entries due a rotation or more ahead
	pool     chunkPool[T] // the slots' chunks
	counts   []int32      // countingSort's table, one per millisecond of a tick
}

// New returns a wheel of tick granularity with at least slots slots (rounded
// up to a power of two), whose current tick holds now (Unix milliseconds).
func New[T any](tick time.Duration, slots int, now int64) (*Wheel[T], error) {
	if tick < time.Millisecond || tick.Milliseconds() > math.MaxUint32 {
		return nil, fmt.Errorf("timewheel: tick must be in 1ms..%v, got %v", time.Duration(math.MaxUint32)*time.Millisecond, tick)
	}
	if slots < 1 || slots > 1<<24 {
		return nil, fmt.Errorf("timewheel: slots must be in 1..%d, got %d", 1<<24, slots)
	}
	n := 1
	for n < slots {
		n <<= 1
	}
	w := &Wheel[T]{tick: tick.Milliseconds(), mask: int64(n - 1), slots: make([]slot[T], n),
		pool: newChunkPool[T](!hasPointers(reflect.TypeFor[T]()))}
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
	switch {
	case t < w.cur:
		w.late.push(it)
	case t-w.cur >= int64(len(w.slots)):
		w.overflow.push(it)
	default:
		w.push(&w.slots[t&w.mask], entry[T]{offset: uint32(it.due - t*w.tick), value: it.value})
	}
}

// Expire calls fn, in due-time order, for entries whose due time is <= now
// and removes them, stopping after max entries when max > 0. It returns the
// number of entries expired. A clock that went back since the last call
// fires nothing that is not due at now.
func (w *Wheel[T]) Expire(now int64, max int, fn func(due int64, value T)) int {
	n := 0
	// Late entries are due before any slot's tick: they come first, and
	// while one of them is not due, nothing else is.
	for w.late.len() > 0 {
		if w.late.min().due > now {
			return n
		}
		if max > 0 && n >= max {
			return n
		}
		it := w.late.pop()
		w.count--
		n++
		fn(it.due, it.value)
	}
	nowTick := w.tickOf(now)
	if w.count == 0 {
		if nowTick > w.cur {
			w.cur = nowTick
		}
		return n
	}
	start := w.cur
	last := nowTick
	if last < start {
		last = start
	}
	if rotationEnd := start + int64(len(w.slots)) - 1; last > rotationEnd {
		last = rotationEnd
	}
	for t := start; t <= last; t++ {
		s := &w.slots[t&w.mask]
		base := t * w.tick
		for s.head < s.n && base+int64(w.first(s).offset) <= now {
			if max > 0 && n >= max {
				w.cur = t
				return n
			}
			e := w.pop(s)
			w.count--
			n++
			fn(base+int64(e.offset), e.value)
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
	if w.late.len() > 0 {
		return w.late.min().due, true
	}
	for t := w.cur; t < w.cur+int64(len(w.slots)); t++ {
		s := &w.slots[t&w.mask]
		if s.head < s.n {
			return t*w.tick + int64(w.first(s).offset), true
		}
	}
	if w.overflow.len() > 0 {
		return w.overflow.min().due, true
	}
	return 0, false
}

// Free drops every entry and unmaps the slots' memory. The wheel stays
// usable (empty).
func (w *Wheel[T]) Free() {
	for i := range w.slots {
		w.reset(&w.slots[i])
	}
	w.pool.release()
	w.late = minHeap[T]{}
	w.overflow = minHeap[T]{}
	w.count = 0
}

// hasPointers reports whether values of type t hold pointers the garbage
// collector must see (so they cannot live in mapped memory).
func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return false
	case reflect.Array:
		return t.Len() > 0 && hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	}
	return true
}

package timewheel

// item is an entry with its full due time, as the heaps keep it.
type item[T any] struct {
	due   int64
	value T
}

// minHeap is a binary min-heap by due time, on the Go heap: it holds the
// few entries outside the slots' rotation (late or far ahead).
type minHeap[T any] struct{ items []item[T] }

func (h *minHeap[T]) len() int     { return len(h.items) }
func (h *minHeap[T]) min() item[T] { return h.items[0] }

func (h *minHeap[T]) push(it item[T]) {
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

func (h *minHeap[T]) pop() item[T] {
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

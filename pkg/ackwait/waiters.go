package ackwait

import "sort"

// Waiters are callbacks waiting for a position, ordered by the position
// each needs. The zero value is empty and ready.
type Waiters struct {
	list []waiter
}

type waiter struct {
	need int64
	done func(error)
}

// Add queues done until the position reaches need; waiters with the same
// need keep their order.
func (w *Waiters) Add(need int64, done func(error)) {
	i := sort.Search(len(w.list), func(i int) bool { return w.list[i].need > need })
	w.list = append(w.list, waiter{})
	copy(w.list[i+1:], w.list[i:])
	w.list[i] = waiter{need: need, done: done}
}

// TakeUpTo removes and returns, in order, the callbacks whose need is at
// most pos.
func (w *Waiters) TakeUpTo(pos int64) []func(error) {
	n := sort.Search(len(w.list), func(i int) bool { return w.list[i].need > pos })
	if n == 0 {
		return nil
	}
	out := make([]func(error), n)
	for i := range n {
		out[i] = w.list[i].done
	}
	w.list = append(w.list[:0], w.list[n:]...)
	return out
}

// TakeAll removes and returns every callback, in order.
func (w *Waiters) TakeAll() []func(error) {
	return w.TakeUpTo(1<<63 - 1)
}

// Len returns how many callbacks wait.
func (w *Waiters) Len() int { return len(w.list) }

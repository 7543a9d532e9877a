package timewheel

import "unsafe"

// chunkBytes is the most bytes a chunk of slot entries takes: one page.
const chunkBytes = 4096

// arenaBytes is how much mapped memory a chunk pool asks the system for at
// a time.
const arenaBytes = 4 << 20

// chunkPool hands out fixed-size chunks of slot entries. When T holds no
// pointers the chunks are carved from large anonymous mappings (arenas)
// outside the Go heap; a chunk given back has its pages returned to the
// system at once (madvise) and is reused as a zeroed chunk. Otherwise, or
// when mapping fails, chunks come from the Go heap and are left to the
// collector when given back.
type chunkPool[T any] struct {
	mapped bool
	size   int // entries per chunk, a power of two
	shift  uint
	arenas [][]byte
	free   [][]entry[T] // chunks of the arenas not in use (their pages dropped)
}

func newChunkPool[T any](mapped bool) chunkPool[T] {
	size := max(chunkBytes/int(unsafe.Sizeof(entry[T]{})), 1)
	shift := uint(0)
	for 1<<(shift+1) <= size {
		shift++
	}
	return chunkPool[T]{mapped: mapped, size: 1 << shift, shift: shift}
}

func (p *chunkPool[T]) get() []entry[T] {
	if len(p.free) == 0 && p.mapped {
		if b, err := mapMemory(arenaBytes); err == nil {
			p.arenas = append(p.arenas, b)
			all := unsafe.Slice((*entry[T])(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(entry[T]{})))
			for i := len(all)/p.size - 1; i >= 0; i-- {
				p.free = append(p.free, all[i*p.size:(i+1)*p.size:(i+1)*p.size])
			}
		}
	}
	if n := len(p.free); n > 0 {
		c := p.free[n-1]
		p.free = p.free[:n-1]
		return c
	}
	return make([]entry[T], p.size)
}

// put takes back a chunk get handed out; its contents are dropped.
func (p *chunkPool[T]) put(c []entry[T]) {
	if !p.inArena(c) {
		return // from the Go heap: the collector frees it
	}
	dropMemory(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(c))), len(c)*int(unsafe.Sizeof(entry[T]{}))))
	p.free = append(p.free, c)
}

func (p *chunkPool[T]) inArena(c []entry[T]) bool {
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(c)))
	for _, a := range p.arenas {
		start := uintptr(unsafe.Pointer(unsafe.SliceData(a)))
		if addr >= start && addr < start+uintptr(len(a)) {
			return true
		}
	}
	return false
}

// release unmaps every arena. Chunks handed out must not be used after it.
func (p *chunkPool[T]) release() {
	for _, a := range p.arenas {
		unmapMemory(a)
	}
	p.arenas, p.free = nil, nil
}

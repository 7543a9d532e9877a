package timewheel

import (
	"cmp"
	"slices"
	"unsafe"
)

// chunkBytes is the most bytes a chunk of slot entries takes: one page.
const chunkBytes = 4096

// arenaBytes is how much mapped memory a chunk pool asks the system for at
// a time.
const arenaBytes = 4 << 20

// chunkPool hands out fixed-size chunks of slot entries. When T holds no
// pointers the chunks are carved from large anonymous mappings (arenas)
// outside the Go heap. Chunks given back stay resident for reuse while they
// are few (at most an eighth of those in use, or keepChunks); beyond that
// the pool returns the pages of all but half of them to the system in one
// pass (madvise over runs of neighbouring chunks), so a wheel that drains
// gives its memory back without a system call per chunk. Otherwise, or
// when mapping fails, chunks come from the Go heap and are left to the
// collector when given back.
type chunkPool[T any] struct {
	mapped  bool
	size    int // entries per chunk, a power of two
	shift   uint
	arenas  [][]byte
	inUse   int
	free    [][]entry[T] // resident chunks of the arenas not in use
	dropped [][]entry[T] // chunks of the arenas not in use, pages returned
}

// keepChunks is how many free chunks the pool keeps resident at least.
const keepChunks = 256

func newChunkPool[T any](mapped bool) chunkPool[T] {
	size := max(chunkBytes/int(unsafe.Sizeof(entry[T]{})), 1)
	shift := uint(0)
	for 1<<(shift+1) <= size {
		shift++
	}
	return chunkPool[T]{mapped: mapped, size: 1 << shift, shift: shift}
}

func (p *chunkPool[T]) get() []entry[T] {
	p.inUse++
	if n := len(p.free); n > 0 {
		c := p.free[n-1]
		p.free = p.free[:n-1]
		return c
	}
	if len(p.dropped) == 0 && p.mapped {
		if b, err := mapMemory(arenaBytes); err == nil {
			p.arenas = append(p.arenas, b)
			all := unsafe.Slice((*entry[T])(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(entry[T]{})))
			for i := len(all)/p.size - 1; i >= 0; i-- {
				p.dropped = append(p.dropped, all[i*p.size:(i+1)*p.size:(i+1)*p.size])
			}
		}
	}
	if n := len(p.dropped); n > 0 {
		c := p.dropped[n-1]
		p.dropped = p.dropped[:n-1]
		return c
	}
	return make([]entry[T], p.size)
}

// put takes back a chunk get handed out; its contents are dropped.
func (p *chunkPool[T]) put(c []entry[T]) {
	p.inUse--
	if !p.inArena(c) {
		return // from the Go heap: the collector frees it
	}
	p.free = append(p.free, c)
	if len(p.free) > max(p.inUse/8, keepChunks) {
		p.trim()
	}
}

// trim returns the pages of all but keepChunks/2 resident free chunks to
// the system, one madvise per run of neighbouring chunks.
func (p *chunkPool[T]) trim() {
	slices.SortFunc(p.free, func(a, b []entry[T]) int {
		return cmp.Compare(uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	})
	keep := keepChunks / 2
	drop := p.free[keep:]
	chunk := uintptr(p.size) * unsafe.Sizeof(entry[T]{})
	for i := 0; i < len(drop); {
		start := uintptr(unsafe.Pointer(unsafe.SliceData(drop[i])))
		j := i + 1
		for j < len(drop) && uintptr(unsafe.Pointer(unsafe.SliceData(drop[j]))) == start+uintptr(j-i)*chunk {
			j++
		}
		dropMemory(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(drop[i]))), uintptr(j-i)*chunk))
		i = j
	}
	p.dropped = append(p.dropped, drop...)
	clear(drop)
	p.free = p.free[:keep]
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
	p.arenas, p.free, p.dropped, p.inUse = nil, nil, nil, 0
}

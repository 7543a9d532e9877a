package hugemem

import (
	"runtime"
	"sync"
	"unsafe"
)

// DefaultChunkBytes is the size of a Slab's chunks unless NewSlab is told
// otherwise: four huge pages.
const DefaultChunkBytes = 4 * PageSize

// Slab hands out slots of one size carved from chunks of memory outside the
// Go heap (anonymous mappings on Linux, advised for huge pages; the heap
// elsewhere). Outside the heap, thousands of long-lived buffers neither
// count towards the collector's goal (a heap twice their size would fill
// with garbage on fresh pages between collections) nor get scanned.
//
// The memory lives as long as the Slab: its chunks are unmapped once the
// Slab is unreachable, so whoever keeps a slot must keep the Slab too (a
// field beside the slot will do). A chunk whose slots are all free is given
// back to the kernel (its pages, not its addresses) and reused later.
//
// Get and Put are safe for concurrent use.
type Slab struct {
	size     int
	perChunk int

	mu     sync.Mutex
	chunks []*chunk // in the order they were made; Get fills the earliest first
	maps   *mappings
	// spare is a chunk made ahead, its pages already faulted in, for the
	// next Get that finds every chunk full; preparing: prepareSpare is
	// making one.
	spare     *chunk
	preparing bool
}

// mappings are the chunks to unmap when the Slab is collected (apart from
// the Slab, so that the cleanup does not keep it reachable).
type mappings struct{ mems [][]byte }

// chunk is one mapping cut into slots.
type chunk struct {
	mem    []byte
	base   uintptr
	mapped bool    // outside the heap: give its pages back when all free
	free   []int32 // indexes of free slots, a stack
	used   []bool  // by slot index: handed out and not given back
}

// NewSlab returns a slab of slots of size bytes, in chunks of chunkBytes
// (DefaultChunkBytes when 0; at least one slot).
func NewSlab(size, chunkBytes int) *Slab {
	if size <= 0 {
		panic("hugemem: slot size must be positive")
	}
	if chunkBytes == 0 {
		chunkBytes = DefaultChunkBytes
	}
	s := &Slab{size: size, perChunk: max(1, chunkBytes/size), maps: &mappings{}}
	runtime.AddCleanup(s, func(m *mappings) {
		for _, b := range m.mems {
			unmapChunk(b)
		}
	}, s.maps)
	return s
}

// SlotSize returns the size of the slab's slots.
func (s *Slab) SlotSize() int { return s.size }

// Get returns a free slot: length 0, capacity SlotSize. Its bytes are
// whatever its last user left there (zeros in a fresh or given-back chunk).
//
// Once the last chunk with free slots is half used, Get has the next chunk
// made ahead on a goroutine of its own (prepareSpare), its pages faulted
// in, so that the caller that fills a chunk does not pay for faulting in
// the next one: with huge pages that is the kernel zeroing 2 MiB at each
// first touch, measured at 17% of a broker's CPU while its first 10,000
// subjects took their buffers. A slab that never fills half a chunk makes
// no spare.
func (s *Slab) Get() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range s.chunks {
		if len(c.free) > 0 {
			b := s.take(c)
			if i == len(s.chunks)-1 {
				s.prepareLocked(c)
			}
			return b
		}
	}
	c := s.spare
	s.spare = nil
	if c == nil {
		c = s.newChunkLocked()
	}
	s.chunks = append(s.chunks, c)
	b := s.take(c)
	s.prepareLocked(c)
	return b
}

// newChunkLocked maps a chunk with every slot free; s.mu is held.
func (s *Slab) newChunkLocked() *chunk {
	mem, mapped := mapChunk(s.perChunk * s.size)
	c := &chunk{mem: mem, base: uintptr(unsafe.Pointer(&mem[0])), mapped: mapped, free: make([]int32, s.perChunk), used: make([]bool, s.perChunk)}
	for i := range c.free {
		c.free[i] = int32(s.perChunk - 1 - i) // slot 0 on top: fill from the start
	}
	if mapped {
		s.maps.mems = append(s.maps.mems, mem)
	}
	return c
}

// prepareLocked starts making a spare chunk when c, the last chunk, is at
// least half used and no spare is ready or on its way; s.mu is held.
func (s *Slab) prepareLocked(c *chunk) {
	if s.spare != nil || s.preparing || 2*len(c.free) > s.perChunk {
		return
	}
	s.preparing = true
	go s.prepareSpare()
}

// prepareSpare makes the spare chunk and faults its pages in (a write of a
// zero to each 4 KiB page: a read would map the shared zero page and leave
// the fault to the first real write). It runs once per chunk and ends on
// its own; meanwhile it keeps the slab reachable.
func (s *Slab) prepareSpare() {
	s.mu.Lock()
	c := s.newChunkLocked()
	s.mu.Unlock()
	for i := 0; i < len(c.mem); i += 4096 {
		c.mem[i] = 0
	}
	s.mu.Lock()
	s.spare, s.preparing = c, false
	s.mu.Unlock()
}

// take pops a free slot of c; s.mu is held.
func (s *Slab) take(c *chunk) []byte {
	i := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	c.used[i] = true
	off := int(i) * s.size
	return c.mem[off : off : off+s.size]
}

// Put gives back a slot that Get returned (any length, same start and
// capacity) and reports whether it was one. Anything else (a buffer from
// make, a slot already given back, a slice into the middle of a slot) is
// left alone and reported false, so a caller may hand Put whatever buffer
// it holds. The caller must not use the slot afterwards.
func (s *Slab) Put(b []byte) bool {
	if cap(b) != s.size {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.chunks {
		if p < c.base || p >= c.base+uintptr(len(c.mem)) {
			continue
		}
		off := p - c.base
		i := int32(off / uintptr(s.size))
		if off%uintptr(s.size) != 0 || !c.used[i] {
			return false
		}
		c.used[i] = false
		c.free = append(c.free, i)
		if len(c.free) == s.perChunk && c.mapped {
			releaseChunk(c.mem)
		}
		return true
	}
	return false
}

// SlabStats describes a slab's memory.
type SlabStats struct {
	Chunks     int   // chunks in use, not counting the spare
	Spare      bool  // a spare chunk is ready, its pages faulted in
	Bytes      int64 // the chunks' size, the spare's included (not all of it need be resident)
	SlotsInUse int
	BytesInUse int64
}

// Stats reports the slab's chunks and the slots handed out.
func (s *Slab) Stats() SlabStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := SlabStats{Chunks: len(s.chunks), Spare: s.spare != nil, Bytes: int64(len(s.chunks) * s.perChunk * s.size)}
	if s.spare != nil {
		st.Bytes += int64(s.perChunk * s.size)
	}
	for _, c := range s.chunks {
		st.SlotsInUse += s.perChunk - len(c.free)
	}
	st.BytesInUse = int64(st.SlotsInUse * s.size)
	return st
}

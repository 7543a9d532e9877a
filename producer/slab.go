package producer

import "sync"

// slab hands out the buffers messages are encoded into, carved from 256 KiB
// chunks, so a message costs one bump of an offset instead of an
// allocation. A chunk is freed by the garbage collector once every message
// carved from it is done.
type slab struct {
	mu    sync.Mutex
	chunk []byte
}

const slabChunk = 256 << 10

// alloc returns an empty slice with capacity n.
func (s *slab) alloc(n int) []byte {
	if n > slabChunk/8 {
		return make([]byte, 0, n)
	}
	s.mu.Lock()
	if cap(s.chunk)-len(s.chunk) < n {
		s.chunk = make([]byte, 0, slabChunk)
	}
	start := len(s.chunk)
	s.chunk = s.chunk[:start+n]
	b := s.chunk[start : start : start+n]
	s.mu.Unlock()
	return b
}

package producer

import "sync"

// slab hands out the buffers messages are encoded into, carved from 256 KiB
// chunks, so a message costs one bump of an offset instead of an
// allocation. Each chunk counts the messages carved from it that are not
// done yet; once the slab has moved on to another chunk and that count is
// zero, the chunk is kept for reuse (up to maxFreeChunks), so a steady
// stream of messages neither allocates nor zeroes memory for their bytes
// (a fresh chunk costs as much to clear as the bytes copied into it, and
// was half of everything the producer allocated: NOTES.md).
type slab struct {
	mu   sync.Mutex
	cur  *chunk
	free []*chunk
}

// chunk is one chunk of a slab: buf's length is what has been carved from it.
type chunk struct {
	buf  []byte
	refs int // messages carved from buf and not released; guarded by slab.mu
}

const (
	slabChunk     = 256 << 10
	maxFreeChunks = 16 // 4 MiB kept for reuse at most
)

// alloc returns an empty slice with capacity n and the chunk it was carved
// from (nil: n was too large to carve, the slice is its own allocation). A
// non-nil chunk must be released once the slice's bytes are no longer used.
func (s *slab) alloc(n int) ([]byte, *chunk) {
	if n > slabChunk/8 {
		return make([]byte, 0, n), nil
	}
	s.mu.Lock()
	c := s.cur
	if c == nil || cap(c.buf)-len(c.buf) < n {
		if c != nil && c.refs == 0 {
			s.keepLocked(c)
		}
		c = s.takeLocked()
		s.cur = c
	}
	start := len(c.buf)
	c.buf = c.buf[:start+n]
	b := c.buf[start : start : start+n]
	c.refs++
	s.mu.Unlock()
	return b, c
}

// takeLocked returns an empty chunk: a kept one, else a new one.
func (s *slab) takeLocked() *chunk {
	if n := len(s.free); n > 0 {
		c := s.free[n-1]
		s.free[n-1] = nil
		s.free = s.free[:n-1]
		c.buf = c.buf[:0]
		return c
	}
	return &chunk{buf: make([]byte, 0, slabChunk)}
}

// keepLocked keeps c, whose bytes are all released, for reuse (or leaves it
// to the garbage collector when enough are kept).
func (s *slab) keepLocked(c *chunk) {
	if len(s.free) < maxFreeChunks {
		s.free = append(s.free, c)
	}
}

// releaseLocked marks one message of c done. s.mu is held.
func (s *slab) releaseLocked(c *chunk) {
	c.refs--
	if c.refs == 0 && c != s.cur {
		s.keepLocked(c)
	}
}

// release marks one message of c (nil: not carved) done.
func (s *slab) release(c *chunk) {
	if c == nil {
		return
	}
	s.mu.Lock()
	s.releaseLocked(c)
	s.mu.Unlock()
}

package producer

import "sync"

// slab holds the memory of messages on their way: the buffers they are
// encoded into, carved from 256 KiB chunks (a message costs one bump of an
// offset instead of an allocation), and their pendings, both handed out
// under one lock (take) and given back a completed batch at a time
// (putDone).
//
// Each chunk counts the messages carved from it that are not done yet;
// once the slab has moved on to another chunk and that count is zero, the
// chunk is kept for reuse (up to maxFreeChunks), so a steady stream of
// messages neither allocates nor zeroes memory for their bytes (a fresh
// chunk costs as much to clear as the bytes copied into it, and was half
// of everything the producer allocated: NOTES.md). Pendings are kept
// likewise (up to maxFreePendings, cleared: they hold no message, callback
// or bytes of a message that is done), cheaper than a sync.Pool's Put and
// Get, which were 7 % of the producer's CPU at 256 B.
type slab struct {
	mu       sync.Mutex
	cur      *chunk
	free     []*chunk
	pendings []*pending
}

// chunk is one chunk of a slab: buf's length is what has been carved from it.
type chunk struct {
	buf  []byte
	refs int // messages carved from buf and not released; guarded by slab.mu
}

const (
	slabChunk       = 256 << 10
	maxFreeChunks   = 16   // 4 MiB kept for reuse at most
	maxFreePendings = 8192 // ~200 B each
)

// take returns a cleared pending and, for n >= 0, an empty slice of
// capacity n and its chunk (as alloc).
func (s *slab) take(n int) (*pending, []byte, *chunk) {
	if n > slabChunk/8 {
		return s.pending(), make([]byte, 0, n), nil
	}
	s.mu.Lock()
	var pd *pending
	if k := len(s.pendings); k > 0 {
		pd = s.pendings[k-1]
		s.pendings[k-1] = nil
		s.pendings = s.pendings[:k-1]
	}
	var b []byte
	var c *chunk
	if n >= 0 {
		b, c = s.carveLocked(n)
	}
	s.mu.Unlock()
	if pd == nil {
		pd = new(pending)
	}
	return pd, b, c
}

// pending returns a cleared pending.
func (s *slab) pending() *pending {
	pd, _, _ := s.take(-1)
	return pd
}

// putDone gives back the bytes and pendings of done, whose callbacks have
// run.
func (s *slab) putDone(done []completion) {
	for _, c := range done {
		*c.pd = pending{chunk: c.pd.chunk}
	}
	s.mu.Lock()
	for _, c := range done {
		s.putLocked(c.pd)
	}
	s.mu.Unlock()
}

// put gives back pd's bytes and pd.
func (s *slab) put(pd *pending) {
	*pd = pending{chunk: pd.chunk}
	s.mu.Lock()
	s.putLocked(pd)
	s.mu.Unlock()
}

// putLocked releases pd's chunk and keeps pd, cleared. s.mu is held.
func (s *slab) putLocked(pd *pending) {
	if pd.chunk != nil {
		s.releaseLocked(pd.chunk)
		pd.chunk = nil
	}
	if len(s.pendings) < maxFreePendings {
		s.pendings = append(s.pendings, pd)
	}
}

// carveLocked carves n bytes (n <= slabChunk/8). s.mu is held.
func (s *slab) carveLocked(n int) ([]byte, *chunk) {
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

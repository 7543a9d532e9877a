package producer

import "testing"

// A chunk whose messages are all done is reused once the slab has moved on
// from it; one with a message still out is not.
func TestSlab_ReusesReleasedChunks(t *testing.T) {
	var s slab
	const n = slabChunk / 8 // the largest carved: 8 to a chunk
	var c1 *chunk
	for i := 0; i < 8; i++ {
		b, c := alloc(&s, n)
		if c == nil || cap(b) != n || i > 0 && c != c1 {
			t.Fatalf("allocation %d: chunk %p (first %p), cap %d", i, c, c1, cap(b))
		}
		c1 = c
	}
	for i := 0; i < 7; i++ {
		release(&s, c1)
	}
	_, c2 := alloc(&s, n) // c1 is full: a new chunk; c1 has a message out
	if c2 == c1 || len(s.free) != 0 {
		t.Fatalf("c2 == c1: %v, %d kept; want a new chunk and nothing kept", c2 == c1, len(s.free))
	}
	release(&s, c1) // c1's last message done: kept
	if len(s.free) != 1 {
		t.Fatalf("%d chunks kept, want 1", len(s.free))
	}
	release(&s, c2) // c2 is the current chunk: not kept
	if len(s.free) != 1 {
		t.Fatalf("%d chunks kept, want 1 (the current one was kept)", len(s.free))
	}
	for i := 0; i < 7; i++ {
		alloc(&s, n)
	}
	b, c3 := alloc(&s, n) // c2 is full: c1 reused, c2 (7 messages out) not kept
	if c3 != c1 || len(c1.buf) != n || cap(b) != n {
		t.Fatalf("c3 == c1: %v, %d bytes carved; want c1 reused from its start", c3 == c1, len(c1.buf))
	}
	if len(s.free) != 0 {
		t.Fatalf("%d chunks kept, want 0", len(s.free))
	}
	if big, c := alloc(&s, n+1); c != nil || cap(big) != n+1 {
		t.Fatal("a large message was carved from the slab")
	}
}

// alloc and release are the slab's bytes alone, as a message takes and
// gives them back with its pending.
func alloc(s *slab, n int) ([]byte, *chunk) {
	_, b, c := s.take(n)
	return b, c
}

func release(s *slab, c *chunk) { s.put(&pending{chunk: c}) }

// Done pendings come back cleared and are handed out again.
func TestSlab_ReusesPendings(t *testing.T) {
	var s slab
	pd, b, c := s.take(100)
	*pd = pending{raw: append(b, "x"...), chunk: c, id: "a", asyncCB: func(*Message, error) {}}
	s.putDone([]completion{{pd: pd}})
	if c.refs != 0 {
		t.Fatalf("chunk holds %d messages after the only one was done", c.refs)
	}
	again := s.pending()
	if again != pd {
		t.Fatal("a done pending was not reused")
	}
	if again.raw != nil || again.id != "" || again.asyncCB != nil || again.chunk != nil {
		t.Fatalf("a reused pending was not cleared: %+v", again)
	}
}

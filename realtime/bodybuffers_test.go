package realtime

import (
	"testing"

	"github.com/qmq-go/qmq/realtime/store"
	"go.uber.org/zap/zaptest"
)

// TestBodyBuffers_BoundedByBytes: a slave keeps received sync bodies to read
// later ones into up to maxSpareBytes of capacity (not a count: a store
// holding a tentative tail keeps several at once), gives back only ones the
// store does not hold, and counts what it gives back.
func TestBodyBuffers_BoundedByBytes(t *testing.T) {
	o := store.DefaultOptions
	o.CheckpointInterval, o.RetentionInterval, o.RetentionAge = -1, -1, -1
	o.Replica = true
	st, err := store.Open(t.TempDir(), o, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	var bb bodyBuffers
	const size = 256 << 10
	n := maxSpareBytes / size
	if n <= 4 {
		t.Fatalf("maxSpareBytes %d keeps %d bodies of %d bytes: no more than the old count bound", maxSpareBytes, n, size)
	}
	for range n + 3 {
		bb.put(make([]byte, size))
	}
	if len(bb.spare) != n || bb.bytes != n*size {
		t.Fatalf("kept %d bodies, %d bytes; want %d, %d", len(bb.spare), bb.bytes, n, n*size)
	}
	bb.put(nil) // nothing to keep
	if len(bb.spare) != n {
		t.Fatalf("kept a nil body: %d", len(bb.spare))
	}
	for i := range n {
		b := bb.take(st) // the store holds no chunk: every body is free
		if b == nil || len(b) != 0 || cap(b) != size {
			t.Fatalf("take %d: len %d cap %d", i, len(b), cap(b))
		}
	}
	if b := bb.take(st); b != nil || bb.bytes != 0 {
		t.Fatalf("took %d bytes from an empty set (%d counted)", cap(b), bb.bytes)
	}
	// A body larger than the bound is not kept.
	bb.put(make([]byte, maxSpareBytes+1))
	if len(bb.spare) != 0 {
		t.Fatal("kept a body over the bound")
	}
}

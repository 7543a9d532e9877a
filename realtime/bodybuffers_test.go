package realtime

import (
	"testing"

	"github.com/qmq-go/qmq/realtime/store"
	"go.uber.org/zap/zaptest"
)

// TestBodyBuffers_KeepsLargeBodiesWithinBytes: a slave keeps received sync
// bodies to read later ones into up to maxSpareBytes of capacity (not a
// count: a store holding a tentative tail keeps several at once), keeps no
// small ones, and gives back the largest the store does not hold.
func TestBodyBuffers_KeepsLargeBodiesWithinBytes(t *testing.T) {
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
	bb.put(make([]byte, 2*size))
	for range n + 3 {
		bb.put(make([]byte, size))
	}
	if want := n - 2 + 1; len(bb.spare) != want || bb.bytes != n*size {
		t.Fatalf("kept %d bodies, %d bytes; want %d, %d", len(bb.spare), bb.bytes, want, n*size)
	}
	bb.put(nil)
	bb.put(make([]byte, minSpareBody-1)) // small: allocating it again costs little
	bb.take(st)
	bb.put(make([]byte, minSpareBody-1))
	if b := bb.take(st); cap(b) != size {
		t.Fatalf("kept a small body: took one of %d bytes", cap(b))
	}
	bb = bodyBuffers{}
	bb.put(make([]byte, size))
	bb.put(make([]byte, 2*size))
	bb.put(make([]byte, size))
	// The store holds no chunk: every body is free, the largest first.
	for i, want := range []int{2 * size, size, size} {
		b := bb.take(st)
		if b == nil || len(b) != 0 || cap(b) != want {
			t.Fatalf("take %d: len %d cap %d, want cap %d", i, len(b), cap(b), want)
		}
	}
	if b := bb.take(st); b != nil || bb.bytes != 0 {
		t.Fatalf("took %d bytes from an empty set (%d counted)", cap(b), bb.bytes)
	}
	bb.put(make([]byte, maxSpareBytes+1))
	if len(bb.spare) != 0 {
		t.Fatal("kept a body over the bound")
	}
}

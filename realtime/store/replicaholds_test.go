package store

import (
	"fmt"
	"testing"
)

// TestReplicaHolds: a chunk kept as a tentative tail is held (its buffer
// must not be reused) until the committed end passes it; a chunk indexed at
// once and an unrelated buffer are not held.
func TestReplicaHolds(t *testing.T) {
	opts := replicaOptions()
	m := openStore(t, t.TempDir(), opts)
	defer m.Close()
	r := openReplica(t, opts, nil)

	body := make([]byte, 300)
	var offs []int64
	for i := range 10 {
		offs = append(offs, appendAll(t, m, encode(t, "s", fmt.Sprintf("a%d", i), body))[0].Offset)
	}
	// The first five records come with an end covering them: indexed at once.
	first := make([]byte, 0, 1<<20)
	mc, err := m.Source().ReadMessageTailInto(first, 0, int(offs[5]))
	if err != nil {
		t.Fatal(err)
	}
	if mc.Offset+int64(len(mc.Data)) != offs[5] {
		t.Fatalf("first chunk ends at %d, want %d", mc.Offset+int64(len(mc.Data)), offs[5])
	}
	if err := r.Replica().ReplicateMessages(mc); err != nil {
		t.Fatal(err)
	}
	if r.Replica().Holds(first) {
		t.Fatal("a chunk indexed at once is held")
	}
	// The rest comes told an end at its seventh record: the tail is kept.
	second := make([]byte, 0, 1<<20)
	mc, err = m.Source().ReadMessageTailInto(second, offs[5], 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	mc.End = offs[7]
	if err := r.Replica().ReplicateMessages(mc); err != nil {
		t.Fatal(err)
	}
	if !r.Replica().Holds(second) {
		t.Fatal("a chunk kept as a tentative tail is not held")
	}
	if r.Replica().Holds(first) || r.Replica().Holds(make([]byte, 0, 1<<20)) || r.Replica().Holds(nil) {
		t.Fatal("a buffer the store never kept is held")
	}
	// The committed end passes it.
	end, _ := m.CommittedEnds()
	if err := r.Replica().ReplicateMessages(LogChunk{Start: mc.Start, End: end, Offset: end}); err != nil {
		t.Fatal(err)
	}
	if c, _ := r.CommittedEnds(); c != end {
		t.Fatalf("replica indexed to %d, want %d", c, end)
	}
	if r.Replica().Holds(second) {
		t.Fatal("a chunk still held after the committed end passed it")
	}
}

// TestReplicaWriteThenSync: WriteMessages writes a chunk without making it
// durable or indexing it; SyncMessages makes it durable (Ends), and
// IndexMessages indexes it only up to the committed end the chunk told and
// only once it is durable.
func TestReplicaWriteThenSync(t *testing.T) {
	opts := replicaOptions()
	m := openStore(t, t.TempDir(), opts)
	defer m.Close()
	r := openReplica(t, opts, nil)

	body := make([]byte, 300)
	var offs []int64
	for i := range 6 {
		offs = append(offs, appendAll(t, m, encode(t, "s", fmt.Sprintf("a%d", i), body))[0].Offset)
	}
	mc, err := m.Source().ReadMessageTailInto(nil, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	written := mc.Offset + int64(len(mc.Data))
	mc.End = offs[4] // the master had committed four records
	if err := r.Replica().WriteMessages(mc); err != nil {
		t.Fatal(err)
	}
	if w, d := r.Replica().Ends(); w != written || d != 0 {
		t.Fatalf("after WriteMessages: written %d durable %d, want %d and 0", w, d, written)
	}
	if err := r.Replica().IndexMessages(); err != nil {
		t.Fatal(err)
	}
	if c, _ := r.CommittedEnds(); c != 0 {
		t.Fatalf("indexed to %d before the chunk was durable", c)
	}
	if err := r.Replica().SyncMessages(); err != nil {
		t.Fatal(err)
	}
	if _, d := r.Replica().Ends(); d != written {
		t.Fatalf("after SyncMessages: durable %d, want %d", d, written)
	}
	if c, _ := r.CommittedEnds(); c != 0 {
		t.Fatalf("SyncMessages indexed (to %d)", c)
	}
	if err := r.Replica().IndexMessages(); err != nil {
		t.Fatal(err)
	}
	if c, _ := r.CommittedEnds(); c != offs[4] {
		t.Fatalf("indexed to %d, want the committed end %d", c, offs[4])
	}
}

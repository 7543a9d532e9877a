package store

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// TestScale runs 10,000 subjects and 2,000 consumers with a small bound on
// open files, and reports the memory each costs.
func TestScale(t *testing.T) {
	subjects, consumers := 10000, 2000
	if testing.Short() {
		subjects, consumers = 2000, 400
	}
	dir := t.TempDir()
	opts := testOptions()
	opts.MaxOpenFiles = 64
	opts.Flush = FlushAsync
	s := openStore(t, dir, opts)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	var batch [][]byte
	for i := 0; i < subjects; i++ {
		batch = append(batch, encode(t, fmt.Sprint("s", i), "m", []byte("x")))
		if len(batch) == 500 {
			appendAll(t, s, batch...)
			batch = nil
		}
	}
	appendAll(t, s, batch...)
	runtime.GC()
	runtime.ReadMemStats(&after)
	perSubject := float64(after.HeapAlloc-before.HeapAlloc) / float64(subjects)
	if st := s.Stats(); st.BufferBytesInUse != int64(subjects*pendingFirstCap) {
		t.Fatalf("consume-log buffers in use: %d bytes, want %d subjects' first buffers", st.BufferBytesInUse, subjects)
	}
	for i := 0; i < consumers; i++ {
		r := pull(t, s, PullRequest{Subject: fmt.Sprint("s", i%200), Group: fmt.Sprint("g", i%7), Consumer: fmt.Sprint("c", i), Earliest: true})
		_ = r
	}
	runtime.GC()
	var after2 runtime.MemStats
	runtime.ReadMemStats(&after2)
	perConsumer := float64(int64(after2.HeapAlloc)-int64(after.HeapAlloc)) / float64(consumers)
	// About 900 B each (doc.go, "Scale and memory"); a group of a quiet
	// subject that kept a message read-ahead buffer after catching up cost
	// 256 KiB per group (~180 KiB per consumer here).
	if perConsumer > 8<<10 {
		t.Fatalf("heap per consumer %.0f B, want under 8 KiB", perConsumer)
	}
	// Two checkpoints: the second releases the buffers of idle subjects.
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.BufferBytesInUse != 0 {
		t.Fatalf("%d bytes of consume-log buffers still held after the idle subjects' checkpoint", st.BufferBytesInUse)
	}
	// A subject taken back into use gets a buffer again, and its entries
	// read back whole.
	appendAll(t, s, encode(t, "s7", "m2", []byte("y")))
	if got, err := s.Read("s7", 0, 10); err != nil || len(got) != 2 || string(got[1].Message[len(got[1].Message)-1:]) != "y" {
		t.Fatalf("read s7 after its buffer came back: %d entries, %v", len(got), err)
	}
	runtime.GC()
	var idle runtime.MemStats
	runtime.ReadMemStats(&idle)
	t.Logf("heap after idle subjects released their buffers: %.0f B per subject+consumer share",
		float64(idle.HeapAlloc-before.HeapAlloc)/float64(subjects))
	if open, _ := s.pool.Stats(); open > opts.MaxOpenFiles {
		t.Fatalf("%d files open, bound %d", open, opts.MaxOpenFiles)
	}
	t.Logf("%d subjects, %d consumers in %v; heap per subject %.0f B, per consumer %.0f B", subjects, consumers, time.Since(start), perSubject, perConsumer)
	closeStart := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("close (checkpoint of every consume log) took %v", time.Since(closeStart))
	s = openStore(t, dir, opts)
	defer s.Close()
	st := s.Stats()
	if len(st.Subjects) != subjects || st.OpenFiles > opts.MaxOpenFiles {
		t.Fatalf("after reopen %d subjects, %d open files", len(st.Subjects), st.OpenFiles)
	}
	got, err := s.Read(fmt.Sprint("s", subjects-1), 0, 10)
	if err != nil || len(got) != 1 {
		t.Fatalf("read last subject: %d %v", len(got), err)
	}
}

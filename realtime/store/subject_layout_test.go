package store

import (
	"fmt"
	"testing"
	"unsafe"
)

// The per-message fields of a subject stay in two cache lines, and the
// struct keeps a size whose allocations start on a cache line (see subject).
func TestSubjectLayout(t *testing.T) {
	var sj subject
	if size := unsafe.Sizeof(sj); size != 192 {
		t.Fatalf("subject is %d bytes, want 192 (a size class at multiples of 64)", size)
	}
	lines := []struct {
		name   string
		offset uintptr
		size   uintptr
		line   uintptr
	}{
		{"next", unsafe.Offsetof(sj.next), unsafe.Sizeof(sj.next), 0},
		{"touched", unsafe.Offsetof(sj.touched), unsafe.Sizeof(sj.touched), 0},
		{"touchedIdx", unsafe.Offsetof(sj.touchedIdx), unsafe.Sizeof(sj.touchedIdx), 0},
		{"watched", unsafe.Offsetof(sj.watched), unsafe.Sizeof(sj.watched), 0},
		{"mu", unsafe.Offsetof(sj.mu), unsafe.Sizeof(sj.mu), 0},
		{"visible", unsafe.Offsetof(sj.visible), unsafe.Sizeof(sj.visible), 0},
		{"bytes", unsafe.Offsetof(sj.bytes), unsafe.Sizeof(sj.bytes), 0},
		{"pending", unsafe.Offsetof(sj.pending), unsafe.Sizeof(sj.pending), 1},
		{"appended", unsafe.Offsetof(sj.appended), unsafe.Sizeof(sj.appended), 1},
		{"name", unsafe.Offsetof(sj.name), unsafe.Sizeof(sj.name), 1},
	}
	for _, f := range lines {
		if f.offset/64 != f.line || (f.offset+f.size-1)/64 != f.line {
			t.Errorf("%s at bytes %d..%d, want within cache line %d", f.name, f.offset, f.offset+f.size, f.line)
		}
	}
	// Allocated subjects start on a cache line.
	for range 100 {
		p := new(subject)
		if uintptr(unsafe.Pointer(p))%64 != 0 {
			t.Fatalf("subject allocated at %p, not on a 64-byte boundary", p)
		}
	}
}

// A subject's buffer grows from a small first size straight to room for a
// full write (not by doubling past it) when its messages come one at a
// time, and every entry stays readable across the writes to the
// consume-log file.
func TestSubjectPendingGrowth(t *testing.T) {
	opts := testOptions()
	opts.Flush = FlushAsync
	s := openStore(t, t.TempDir(), opts)
	defer s.Close()
	const n = 3*pendingFlushBytes/entryWidth + 7
	maxCap := 0
	for i := range n {
		appendAll(t, s, encode(t, "grow", fmt.Sprint("m", i), []byte{byte(i)}))
		sj := s.lookupSubject([]byte("grow"))
		sj.mu.RLock()
		maxCap = max(maxCap, cap(sj.pending))
		sj.mu.RUnlock()
	}
	if maxCap < pendingFullCap || maxCap >= 2*pendingFlushBytes {
		t.Fatalf("buffer grew to %d bytes, want room for %d (less than 32 KiB)", maxCap, pendingFullCap)
	}
	if st := s.Stats(); st.BufferBytesInUse != pendingFullCap {
		t.Fatalf("%d bytes of buffers in use, want one full buffer (the first given back)", st.BufferBytesInUse)
	}
	got, err := s.Read("grow", 0, n+1)
	if err != nil || len(got) != n {
		t.Fatalf("read %d of %d: %v", len(got), n, err)
	}
	for i, p := range got {
		if p.ConsumeSeq != int64(i) || p.Message[len(p.Message)-1] != byte(i) {
			t.Fatalf("entry %d has sequence %d", i, p.ConsumeSeq)
		}
	}
}

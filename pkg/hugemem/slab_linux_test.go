package hugemem

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/testutil"
)

// A chunk whose slots all came back gives its pages to the kernel: its
// slots read as zeros when handed out again.
func TestSlab_FreeChunkGivesItsPagesBack(t *testing.T) {
	const size = 4096
	s := NewSlab(size, 16*size)
	var slots [][]byte
	for range 16 {
		b := s.Get()[:size]
		for i := range b {
			b[i] = 0xAB
		}
		slots = append(slots, b)
	}
	for _, b := range slots[:15] {
		s.Put(b)
	}
	b := s.Get()[:size] // the chunk still has a slot in use: bytes kept
	if b[0] != 0xAB {
		t.Fatalf("slot reused in a chunk in use reads %#x, want the old 0xAB", b[0])
	}
	s.Put(b)
	s.Put(slots[15])
	for range 16 {
		b := s.Get()[:size]
		for i, v := range b {
			if v != 0 {
				t.Fatalf("slot of a chunk given back reads %#x at %d, want 0", v, i)
			}
		}
	}
}

// Where the kernel offers transparent huge pages, a slab's memory is on
// them.
func TestSlab_OnHugePages(t *testing.T) {
	if !testutil.HugePagesOffered() {
		t.Skip("no transparent huge pages here")
	}
	before := testutil.AnonHugeKiB(t)
	s := NewSlab(16<<10, 0)
	for range DefaultChunkBytes / (16 << 10) {
		b := s.Get()[:16<<10]
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
	}
	if grown := testutil.AnonHugeKiB(t) - before; grown < 2048 {
		t.Fatalf("huge-page memory grew by %d KiB for a full %d MiB chunk", grown, DefaultChunkBytes>>20)
	}
	runtime.KeepAlive(s)
}

// A slab nothing refers to any more has its chunks unmapped.
func TestSlab_UnmappedWhenUnreachable(t *testing.T) {
	start := func() uintptr {
		s := NewSlab(1<<20, 0)
		b := s.Get()[:1]
		b[0] = 1
		return addr(b)
	}()
	if !mapped(t, start) {
		t.Fatalf("slot at %#x is in no mapping while its slab lives?", start)
	}
	deadline := time.Now().Add(10 * time.Second)
	for mapped(t, start) {
		if time.Now().After(deadline) {
			t.Fatalf("chunk at %#x still mapped 10 s after its slab became unreachable", start)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// mapped reports whether a mapping of this process holds address a.
func mapped(t *testing.T, a uintptr) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		r, _, _ := strings.Cut(l, " ")
		lo, hi, ok := strings.Cut(r, "-")
		if !ok {
			continue
		}
		l, err1 := strconv.ParseUint(lo, 16, 64)
		h, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 == nil && err2 == nil && uint64(a) >= l && uint64(a) < h {
			return true
		}
	}
	return false
}

// A chunk of at least a huge page starts on a huge-page boundary and is
// mapped in whole huge pages, so all of it can be on huge pages (slots of
// 16,440 bytes fill 4,208 bytes less than 8 MiB).
func TestSlab_ChunksAreWholeAlignedHugePages(t *testing.T) {
	s := NewSlab(16440, 0)
	first := s.Get()
	if a := addr(first); a%PageSize != 0 {
		t.Fatalf("first slot of a %d MiB chunk at %#x, not on a %d KiB boundary", DefaultChunkBytes>>20, a, PageSize>>10)
	}
	s.mu.Lock()
	c := s.chunks[0]
	s.mu.Unlock()
	if !c.mapped {
		t.Skip("the kernel refused the mapping")
	}
	if len(c.mem) != 510*16440 || cap(c.mem) != DefaultChunkBytes {
		t.Fatalf("chunk of %d bytes mapped as %d, want %d rounded up to %d", len(c.mem), cap(c.mem), 510*16440, DefaultChunkBytes)
	}
	runtime.KeepAlive(s)
}

package store

import (
	"cmp"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/qmq-go/qmq/pkg/protocol"
)

func byKeyThenOffset(a, b indexEntry) int {
	switch ka, kb := indexKey(a.hash), indexKey(b.hash); {
	case ka < kb:
		return -1
	case ka > kb:
		return 1
	}
	return int(a.off - b.off)
}

// randomEntries returns n entries in offset order (as the index collects
// them: a message may give two), some sharing a hash.
func randomEntries(r *rand.Rand, n int) []indexEntry {
	out := make([]indexEntry, n)
	off := int64(0)
	for i := range out {
		if r.IntN(3) != 0 {
			off += int64(1 + r.IntN(2000))
		}
		h := r.Uint64()
		if i > 0 && r.IntN(8) == 0 {
			h = out[r.IntN(i)].hash // a duplicate id or key
		}
		if r.IntN(16) == 0 {
			h &= 0xffff // hashes alike in their high bits
		}
		out[i] = indexEntry{hash: h, off: off}
	}
	return out
}

// sortIndexEntries gives what a sort by (key, offset) gives, for runs
// below and above the radix sort's threshold, with a scratch array too
// short, long enough, and reused.
func TestSortIndexEntries(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var scratch []indexEntry
	for _, n := range []int{0, 1, 2, 100, indexSortMinLen - 1, indexSortMinLen, 5000, 100_000} {
		got := randomEntries(r, n)
		want := slices.Clone(got)
		// Stable: entries of one key and one offset (a message's id and
		// key) keep their order.
		slices.SortStableFunc(want, byKeyThenOffset)
		var sorted []indexEntry
		sorted, scratch = sortIndexEntries(got, scratch)
		if !slices.Equal(sorted, want) {
			t.Fatalf("%d entries: sorted differently", n)
		}
	}
}

func BenchmarkSortIndexEntries(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	in := randomEntries(r, 1<<20)
	work := make([]indexEntry, len(in))
	var scratch []indexEntry
	b.Run("radix", func(b *testing.B) {
		for b.Loop() {
			copy(work, in)
			work, scratch = sortIndexEntries(work, scratch)
		}
	})
	b.Run("SortFunc", func(b *testing.B) {
		for b.Loop() {
			copy(work, in)
			slices.SortFunc(work, byKeyThenOffset)
		}
	})
}

// A run finds exactly the entries of a hash, among entries whose hashes
// share its sort key (the top 22 bits) and across fences, in the order
// this code writes (format 2) and in format 1's (the whole hash), which
// older code wrote.
func TestIndexRunFindsSharedKeys(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var entries []indexEntry
	want := map[uint64][]int64{}
	off := int64(0)
	for range 20_000 {
		off += int64(1 + r.IntN(100))
		// Few keys, few hashes a key: blocks of equal keys span fences.
		h := uint64(r.IntN(40))<<indexKeyShift | uint64(r.IntN(5))
		entries = append(entries, indexEntry{h, off})
		want[h] = append(want[h], off)
	}
	check := func(run *indexRun, format string) {
		t.Helper()
		for k := range 41 {
			for low := range 6 {
				h := uint64(k)<<indexKeyShift | uint64(low)
				got := run.find(h, nil)
				slices.Sort(got)
				if !slices.Equal(got, want[h]) {
					t.Fatalf("%s: hash %x found %d entries, want %d", format, h, len(got), len(want[h]))
				}
			}
		}
	}
	dir := t.TempDir()
	sorted, _ := sortIndexEntries(slices.Clone(entries), nil)
	run, err := writeIndexRun(dir, 0, off+1, sorted)
	if err != nil {
		t.Fatal(err)
	}
	defer run.f.Close()
	check(run, "format 2")
	reopened, err := openIndexRun(run.path)
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.f.Close()
	check(reopened, "format 2 reopened")
	// Format 1: by the whole hash, then offset, under its own magic.
	full := slices.Clone(entries)
	slices.SortStableFunc(full, func(a, b indexEntry) int { return cmp.Compare(a.hash, b.hash) })
	if err := os.Mkdir(filepath.Join(dir, "v1"), 0o700); err != nil {
		t.Fatal(err)
	}
	old, err := writeIndexRun(filepath.Join(dir, "v1"), 0, off+1, full)
	if err != nil {
		t.Fatal(err)
	}
	old.f.Close()
	asFormat1(t, old.path)
	v1, err := openIndexRun(old.path)
	if err != nil {
		t.Fatal(err)
	}
	defer v1.f.Close()
	if v1.shift != 0 {
		t.Fatalf("a format 1 run read with shift %d", v1.shift)
	}
	check(v1, "format 1")
}

// asFormat1 gives the run at path (its entries in the order of their whole
// hash) format 1's magic, and its checksum again.
func asFormat1(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	copy(b, indexMagic1)
	count := int(binary.BigEndian.Uint32(b[24:]))
	nf := (count + indexFence - 1) / indexFence
	fencesAt := indexHeaderSize + count*indexEntrySize
	crc := crc32.Update(protocol.Checksum(b[:indexHeaderSize]), crc32.MakeTable(crc32.Castagnoli), b[fencesAt:fencesAt+nf*8])
	binary.BigEndian.PutUint32(b[fencesAt+nf*8:], crc)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

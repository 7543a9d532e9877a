package store

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func byHashThenOffset(a, b indexEntry) int {
	switch {
	case a.hash < b.hash:
		return -1
	case a.hash > b.hash:
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

// sortIndexEntries gives what a sort by (hash, offset) gives, for runs
// below and above the radix sort's threshold.
func TestSortIndexEntries(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 100, indexSortMinLen - 1, indexSortMinLen, 5000, 100_000} {
		got := randomEntries(r, n)
		want := slices.Clone(got)
		slices.SortFunc(want, byHashThenOffset)
		sortIndexEntries(got)
		if !slices.Equal(got, want) {
			t.Fatalf("%d entries: sorted differently", n)
		}
	}
}

func BenchmarkSortIndexEntries(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	in := randomEntries(r, 1<<20)
	work := make([]indexEntry, len(in))
	b.Run("radix", func(b *testing.B) {
		for b.Loop() {
			copy(work, in)
			sortIndexEntries(work)
		}
	})
	b.Run("SortFunc", func(b *testing.B) {
		for b.Loop() {
			copy(work, in)
			slices.SortFunc(work, byHashThenOffset)
		}
	})
}

package store

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortIndexEntries: the bucketed sort orders entries as a comparison
// sort by (hash, offset) does: uniform hashes, hashes sharing their top
// bits (one big bucket), repeated hashes and short runs.
func TestSortIndexEntries(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	gens := map[string]func(i int) uint64{
		"uniform":  func(int) uint64 { return rng.Uint64() },
		"same-top": func(int) uint64 { return 0xabcd<<48 | rng.Uint64()>>16 },
		"repeated": func(i int) uint64 { return uint64(i%7) << 60 },
		"few":      func(int) uint64 { return rng.Uint64() % 3 },
	}
	for name, gen := range gens {
		for _, n := range []int{0, 1, 5, 64, 65, 1000, 100_000} {
			entries := make([]indexEntry, n)
			for i := range entries {
				entries[i] = indexEntry{hash: gen(i), off: int64(i) * 300}
			}
			want := slices.Clone(entries)
			slices.SortFunc(want, compareIndexEntries)
			sortIndexEntries(entries)
			if !slices.Equal(entries, want) {
				t.Fatalf("%s, %d entries: not sorted by hash and offset", name, n)
			}
		}
	}
}

func BenchmarkSortIndexEntries(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]indexEntry, 1<<20)
	for i := range src {
		src[i] = indexEntry{hash: rng.Uint64(), off: int64(i) * 300}
	}
	entries := make([]indexEntry, len(src))
	b.Run("bucketed", func(b *testing.B) {
		for b.Loop() {
			copy(entries, src)
			sortIndexEntries(entries)
		}
	})
	b.Run("comparison", func(b *testing.B) {
		for b.Loop() {
			copy(entries, src)
			slices.SortFunc(entries, compareIndexEntries)
		}
	})
}

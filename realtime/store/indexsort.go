package store

import (
	"cmp"
	"slices"
)

// indexSortBits is how many top bits of the hash sortIndexEntries buckets
// by (65,536 buckets: about 16 entries each in a run of 1 Mi entries).
const indexSortBits = 16

// indexSortSmall: at most this many entries are sorted by comparison, and
// a bucket larger than it too (hashes that share their top bits).
const indexSortSmall = 64

// sortIndexEntries sorts entries by hash, then offset, as a run is
// written. The hashes are uniform, so two counting passes over their top
// 16 bits (stable: entries come in log order, so by offset) leave buckets
// of a handful of entries, each finished by insertion; this is several times
// cheaper than a comparison sort of the whole run, which was a tenth of a
// slave's CPU when copying a producer flat out (NOTES.md).
func sortIndexEntries(entries []indexEntry) {
	if len(entries) <= indexSortSmall {
		slices.SortFunc(entries, compareIndexEntries)
		return
	}
	// Two stable passes of 8 bits (bits 48-55, then 56-63: 256 places
	// written at a time, which caches and TLBs hold) order the entries by
	// their top 16 bits, keeping log order within each.
	scratch := make([]indexEntry, len(entries))
	src, dst := entries, scratch
	for _, shift := range [2]uint{48, 56} {
		var next [256]int
		for i := range src {
			next[byte(src[i].hash>>shift)]++
		}
		at := 0
		for d, n := range next {
			next[d] = at
			at += n
		}
		for _, e := range src {
			d := byte(e.hash >> shift)
			dst[next[d]] = e
			next[d]++
		}
		src, dst = dst, src
	}
	// Two passes: the entries are back in entries. Bucket b (the top 16
	// bits) starts at counts[b].
	var counts [1<<indexSortBits + 1]int32
	for i := range entries {
		counts[entries[i].hash>>(64-indexSortBits)+1]++
	}
	for b := 1; b < len(counts); b++ {
		counts[b] += counts[b-1]
	}
	for b := 0; b < 1<<indexSortBits; b++ {
		bucket := entries[counts[b]:counts[b+1]]
		if len(bucket) > indexSortSmall {
			slices.SortFunc(bucket, compareIndexEntries)
			continue
		}
		for i := 1; i < len(bucket); i++ {
			for j := i; j > 0 && compareIndexEntries(bucket[j], bucket[j-1]) < 0; j-- {
				bucket[j], bucket[j-1] = bucket[j-1], bucket[j]
			}
		}
	}
}

func compareIndexEntries(a, b indexEntry) int {
	if c := cmp.Compare(a.hash, b.hash); c != 0 {
		return c
	}
	return cmp.Compare(a.off, b.off)
}

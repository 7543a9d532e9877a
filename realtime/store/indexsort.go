package store

import "slices"

// Sorting a run's entries (msgindex.go): by sort key, then by offset.
//
// A run written by this code (format 2, "QMQIDX2\n") is in the order of
// its entries' sort keys, the hash's top indexKeyBits bits (hash >>
// indexKeyShift), and entries with equal keys in offset order; a lookup
// compares keys to find a hash's block and checks every entry of the
// block whose key is the hash's (runs of format 1 are in full hash order,
// which is that order too, with a shift of 0). A run of 2^20 entries has
// a quarter as many as there are 22-bit keys: the entries of a key lie
// within one or two fence blocks of 256, which is what a lookup read
// with the whole hash too, and they sort in two radix passes where the
// whole hash took six (the sort was still 3.5 % of a storing broker's CPU
// with three passes of 33 bits).
//
// The index collects entries in log order, so their offsets never
// decrease, and a stable sort by key alone leaves equal keys in offset
// order. sortIndexEntries does that with an LSD radix sort, two passes
// of 11 bits (2,048 buckets, whose counts stay in the L1 cache) through a
// scratch array as large as the run, kept from one run to the next (a
// new 16 MiB array for each run, zeroed, was 2.5 % of a storing broker's
// CPU). The comparison sort it replaced was an eighth of a storing store's
// CPU (NOTES.md, "Group commit"), the six-pass radix sort of the whole
// hash 5 %.
const (
	indexSortBits   = 11
	indexKeyBits    = 2 * indexSortBits
	indexKeyShift   = 64 - indexKeyBits
	indexSortMinLen = 512 // below this, a comparison sort
)

// indexKey is the sort key of a hash in a run of format 2.
func indexKey(h uint64) uint64 { return h >> indexKeyShift }

// sortIndexEntries sorts entries (in nondecreasing offset order) by key,
// then offset, using scratch (grown when shorter than entries), and
// returns the sorted entries (entries or scratch's array) and the scratch
// array left over for the next call.
func sortIndexEntries(entries, scratch []indexEntry) (sorted, spare []indexEntry) {
	if len(entries) < indexSortMinLen {
		slices.SortStableFunc(entries, func(a, b indexEntry) int {
			switch ka, kb := indexKey(a.hash), indexKey(b.hash); {
			case ka < kb:
				return -1
			case ka > kb:
				return 1
			}
			return 0
		})
		return entries, scratch
	}
	if cap(scratch) < len(entries) {
		scratch = make([]indexEntry, len(entries), cap(entries))
	}
	const buckets = 1 << indexSortBits
	var count [buckets]int
	src, dst := entries, scratch[:len(entries)]
	for shift := uint(indexKeyShift); shift < 64; shift += indexSortBits {
		clear(count[:])
		for i := range src {
			count[(src[i].hash>>shift)&(buckets-1)]++
		}
		sum := 0
		for d, c := range count {
			count[d] = sum
			sum += c
		}
		for i := range src {
			d := (src[i].hash >> shift) & (buckets - 1)
			dst[count[d]] = src[i]
			count[d]++
		}
		src, dst = dst, src
	}
	return src, dst[:0]
}

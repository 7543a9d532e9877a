package store

import (
	"encoding/binary"
	"errors"
	"math"
	"runtime"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// Ordering a run's entries (msgindex.go): into buckets by the hash's top
// bits, each bucket in offset order.
//
// A run written by this code (format 3, "QMQIDX3\n") holds its entries in
// indexBuckets buckets, an entry's bucket being the top indexBucketBits
// bits of its hash; a bucket's entries are in offset order, and the
// header's bucket table says where each bucket ends and holds its
// checksum, so a lookup reads exactly one bucket (one pread, ~512 entries
// in a run of 2^20), checks it, and keeps the entries whose fragment (the
// next 32 bits of the hash) is the hash's.
// An entry is 8 bytes, the fragment and the record's offset from the
// run's from (a run never spans two segments, and never more than 4 GiB).
//
// The index collects entries in log order, so their offsets never
// decrease, and one stable pass that scatters them by bucket leaves each
// bucket in offset order: bucketRun counts the buckets, then writes each
// entry, encoded, at its place in the run's file image (one buffer, kept
// from one run to the next, written with one write). Format 2's two radix
// passes over 16-byte entries, then an encoding pass, were 3.2 % of a
// storing broker's CPU (NOTES.md, "Message index, format 3").
const (
	indexBucketBits  = 11
	indexBuckets     = 1 << indexBucketBits
	indexBucketShift = 64 - indexBucketBits
	indexFragShift   = indexBucketShift - 32 // the fragment: hash bits 21..52
	indexEntrySize3  = 8
	// indexDataAt3 is where a format 3 run's entries begin: the header,
	// the bucket table and its checksum.
	indexDataAt3 = indexHeaderSize + 8*indexBuckets + 4
	// indexMaxSpan is the widest log range a run of format 3 covers (its
	// entries' offsets are 32 bits from its from).
	indexMaxSpan = math.MaxUint32
	// indexYieldEvery+1 entries (~1 ms) are scattered between yields.
	indexYieldEvery = 1<<16 - 1
)

var errIndexSpan = errors.New("store: index run spans more than 4 GiB of log")

// indexBucket is the bucket of a hash in a run of format 3.
func indexBucket(h uint64) int { return int(h >> indexBucketShift) }

// indexFrag is the part of a hash a run of format 3 keeps in an entry.
func indexFrag(h uint64) uint32 { return uint32(h >> indexFragShift) }

// bucketRun returns the file image of a run of format 3 covering the log
// range [from, to) with entries (in nondecreasing offset order, every
// offset in [from, to)), built in buf (grown when too short), and its
// bucket table.
//
//	0          8          16         24          28            32
//	+----------+----------+----------+-----------+-------------+
//	| "QMQIDX3\n" | from i64 | to i64 | count u32 | buckets u32 |
//	+----------+----------+----------+-----------+-------------+
//	32: buckets × (end u32: entries in buckets 0..b | crc32c u32 of the bucket's entries)
//	    crc32c u32 over all before
//	indexDataAt3: count × (fragment u32 | offset − from u32), by bucket
func bucketRun(buf []byte, from, to int64, entries []indexEntry) ([]byte, bucketTable, error) {
	if to-from > indexMaxSpan || len(entries) > math.MaxUint32 {
		return buf, bucketTable{}, errIndexSpan
	}
	size := indexDataAt3 + len(entries)*indexEntrySize3
	if cap(buf) < size {
		buf = make([]byte, size, size+size/4)
	}
	buf = buf[:size]
	var pos [indexBuckets]uint32
	for i := range entries {
		pos[indexBucket(entries[i].hash)]++
	}
	ends := make([]uint32, indexBuckets)
	sum := uint32(0)
	for b, c := range pos {
		pos[b] = sum
		sum += c
		ends[b] = sum
	}
	data := buf[indexDataAt3:]
	for i := range entries {
		if i&indexYieldEvery == indexYieldEvery {
			// A broker on one processor (pkg/procs) goes on serving
			// between slices of the pass instead of waiting for it.
			runtime.Gosched()
		}
		e := &entries[i]
		b := indexBucket(e.hash)
		p := int(pos[b]) * indexEntrySize3
		pos[b]++
		binary.BigEndian.PutUint32(data[p:], indexFrag(e.hash))
		binary.BigEndian.PutUint32(data[p+4:], uint32(e.off-from))
	}
	copy(buf, indexMagic3)
	binary.BigEndian.PutUint64(buf[8:], uint64(from))
	binary.BigEndian.PutUint64(buf[16:], uint64(to))
	binary.BigEndian.PutUint32(buf[24:], uint32(len(entries)))
	binary.BigEndian.PutUint32(buf[28:], indexBuckets)
	crcs := make([]uint32, indexBuckets)
	lo := uint32(0)
	for b, end := range ends {
		crcs[b] = protocol.Checksum(data[lo*indexEntrySize3 : end*indexEntrySize3])
		lo = end
		binary.BigEndian.PutUint32(buf[indexHeaderSize+8*b:], end)
		binary.BigEndian.PutUint32(buf[indexHeaderSize+8*b+4:], crcs[b])
	}
	crcAt := indexDataAt3 - 4
	binary.BigEndian.PutUint32(buf[crcAt:], protocol.Checksum(buf[:crcAt]))
	return buf, bucketTable{ends, crcs}, nil
}

// bucketTable is a format 3 run's table: where each bucket ends, and the
// checksum of its entries.
type bucketTable struct {
	ends, crcs []uint32
}

// bucket returns the entries [lo, hi) of bucket b and their checksum.
func (t bucketTable) bucket(b int) (lo, hi, crc uint32) {
	if b > 0 {
		lo = t.ends[b-1]
	}
	return lo, t.ends[b], t.crcs[b]
}

// parseBucketTable checks a format 3 run's header and bucket table (b,
// its first indexDataAt3 bytes) and returns the table.
func parseBucketTable(b []byte, count int) (bucketTable, error) {
	if len(b) < indexDataAt3 || int(binary.BigEndian.Uint32(b[28:])) != indexBuckets {
		return bucketTable{}, errors.New("bad header")
	}
	crcAt := indexDataAt3 - 4
	if protocol.Checksum(b[:crcAt]) != binary.BigEndian.Uint32(b[crcAt:]) {
		return bucketTable{}, errors.New("bad checksum")
	}
	t := bucketTable{make([]uint32, indexBuckets), make([]uint32, indexBuckets)}
	prev := uint32(0)
	for i := range t.ends {
		t.ends[i] = binary.BigEndian.Uint32(b[indexHeaderSize+8*i:])
		t.crcs[i] = binary.BigEndian.Uint32(b[indexHeaderSize+8*i+4:])
		if t.ends[i] < prev {
			return bucketTable{}, errors.New("bad bucket table")
		}
		prev = t.ends[i]
	}
	if int(prev) != count {
		return bucketTable{}, errors.New("bad bucket table")
	}
	return t, nil
}

// errBucketChecksum: a bucket's entries do not match their checksum.
var errBucketChecksum = errors.New("bad bucket checksum")

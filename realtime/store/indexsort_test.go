package store

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/qmq-go/qmq/pkg/protocol"
)

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

// runEntry is what a format 3 run keeps of an entry: the hash's top 43
// bits (bucket and fragment) and the offset.
type runEntry struct {
	top uint64
	off int64
}

// decodeRun returns the entries of the format 3 image b, in file order.
func decodeRun(t testing.TB, b []byte) []runEntry {
	t.Helper()
	if string(b[:8]) != indexMagic3 {
		t.Fatalf("magic %q", b[:8])
	}
	from, count := int64(binary.BigEndian.Uint64(b[8:])), int(binary.BigEndian.Uint32(b[24:]))
	table, err := parseBucketTable(b[:indexDataAt3], count)
	if err != nil {
		t.Fatal(err)
	}
	ends := table.ends
	if len(b) != indexDataAt3+count*indexEntrySize3 {
		t.Fatalf("%d bytes for %d entries", len(b), count)
	}
	out := make([]runEntry, 0, count)
	lo := uint32(0)
	for bk, hi := range ends {
		if protocol.Checksum(b[indexDataAt3+int(lo)*indexEntrySize3:indexDataAt3+int(hi)*indexEntrySize3]) != table.crcs[bk] {
			t.Fatalf("bucket %d: bad checksum", bk)
		}
		for i := lo; i < hi; i++ {
			p := indexDataAt3 + int(i)*indexEntrySize3
			frag := uint64(binary.BigEndian.Uint32(b[p:]))
			out = append(out, runEntry{uint64(bk)<<32 | frag, from + int64(binary.BigEndian.Uint32(b[p+4:]))})
		}
		lo = hi
	}
	return out
}

// bucketRun gives the entries in bucket order, each bucket in offset order
// and stable (a message's id and key keep their order), for empty, small
// and large runs, with a buffer too short, long enough, and reused; a run
// wider than 4 GiB of log is refused.
func TestBucketRun(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var buf []byte
	for _, n := range []int{0, 1, 2, 100, 5000, 100_000} {
		entries := randomEntries(r, n)
		from := int64(1 << 40)
		for i := range entries {
			entries[i].off += from
		}
		to := from + 1
		if n > 0 {
			to = entries[n-1].off + 1
		}
		want := make([]runEntry, n)
		for i, e := range entries {
			want[i] = runEntry{e.hash >> indexFragShift, e.off}
		}
		slices.SortStableFunc(want, func(a, b runEntry) int { return cmp.Compare(a.top>>32, b.top>>32) })
		var err error
		buf, _, err = bucketRun(buf, from, to, entries)
		if err != nil {
			t.Fatal(err)
		}
		if got := decodeRun(t, buf); !slices.Equal(got, want) {
			t.Fatalf("%d entries: bucketed differently (first difference at %d)", n, firstDiff(got, want))
		}
	}
	if _, _, err := bucketRun(nil, 0, indexMaxSpan+1, nil); err == nil {
		t.Fatal("a run of more than 4 GiB accepted")
	}
}

func BenchmarkBucketRun(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	in := randomEntries(r, 1<<20)
	var buf []byte
	for b.Loop() {
		buf, _, _ = bucketRun(buf, 0, in[len(in)-1].off+1, in)
	}
}

// A run finds the entries of a hash, among entries whose hashes share its
// bucket or more (format 3: every entry whose top 43 bits are the hash's,
// a superset the lookup checks against the records), and exactly them in
// formats 2 and 1 (by the top 22 bits, by the whole hash), which older
// code wrote; each also after reopening.
func TestIndexRunFindsSharedKeys(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var entries []indexEntry
	want := map[uint64][]int64{}
	off := int64(0)
	hash := func(k, low int) uint64 { return uint64(k)<<indexKeyShift2 | uint64(low)<<indexFragShift | uint64(low) }
	for range 20_000 {
		off += int64(1 + r.IntN(100))
		// Few keys and buckets, few hashes a key: blocks of equal keys
		// span fences, buckets hold thousands.
		h := hash(r.IntN(40), r.IntN(5))
		entries = append(entries, indexEntry{h, off})
		want[h] = append(want[h], off)
	}
	check := func(run *indexRun, format string) {
		t.Helper()
		for k := range 41 {
			for low := range 6 {
				h := hash(k, low)
				var got []int64
				var err error
				if run.format == 3 {
					got, err = run.findBucket(h, nil)
					// A hash differing only below the fragment is a candidate too.
					if alike, _ := run.findBucket(h^1<<(indexFragShift-1), nil); !slices.Equal(alike, got) {
						t.Fatalf("%s: hash %x: a hash alike in its top 43 bits found %d, want %d", format, h, len(alike), len(got))
					}
				} else {
					got, err = run.find(h, nil)
				}
				if err != nil {
					t.Fatal(err)
				}
				slices.Sort(got)
				if !slices.Equal(got, want[h]) {
					t.Fatalf("%s: hash %x found %d entries, want %d", format, h, len(got), len(want[h]))
				}
			}
		}
	}
	dir := t.TempDir()
	run, _, err := writeIndexRun(dir, 0, off+1, entries, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer run.f.Close()
	check(run, "format 3")
	reopened, err := openIndexRun(run.path)
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.f.Close()
	check(reopened, "format 3 reopened")
	for _, format := range []int{2, 1} {
		sub := filepath.Join(dir, fmt.Sprint("v", format))
		if err := os.Mkdir(sub, 0o700); err != nil {
			t.Fatal(err)
		}
		path := writeOldRun(t, sub, format, 0, off+1, entries)
		old, err := openIndexRun(path)
		if err != nil {
			t.Fatal(err)
		}
		defer old.f.Close()
		if old.format != format {
			t.Fatalf("a format %d run read as format %d", format, old.format)
		}
		check(old, fmt.Sprint("format ", format))
	}
}

// writeOldRun writes entries (in offset order, hashed as format wants) as a
// run of format 2 or 1, as older code did, and returns its path.
func writeOldRun(t testing.TB, dir string, format int, from, to int64, entries []indexEntry) string {
	t.Helper()
	entries = slices.Clone(entries)
	magic, shift := indexMagic2, uint(indexKeyShift2)
	if format == 1 {
		magic, shift = indexMagic1, 0
	}
	slices.SortStableFunc(entries, func(a, b indexEntry) int { return cmp.Compare(a.hash>>shift, b.hash>>shift) })
	path := filepath.Join(dir, fmt.Sprintf("%020d.run", from))
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	nf := (len(entries) + indexFence - 1) / indexFence
	var h [indexHeaderSize]byte
	copy(h[:], magic)
	binary.BigEndian.PutUint64(h[8:], uint64(from))
	binary.BigEndian.PutUint64(h[16:], uint64(to))
	binary.BigEndian.PutUint32(h[24:], uint32(len(entries)))
	binary.BigEndian.PutUint32(h[28:], uint32(nf))
	w := bufio.NewWriter(f)
	w.Write(h[:])
	var fb []byte
	for i, e := range entries {
		w.Write(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, e.hash), uint64(e.off)))
		if i%indexFence == 0 {
			fb = binary.BigEndian.AppendUint64(fb, e.hash)
		}
	}
	crc := crc32.Update(protocol.Checksum(h[:]), crc32.MakeTable(crc32.Castagnoli), fb)
	w.Write(binary.BigEndian.AppendUint32(fb, crc))
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return path
}

// indexHash spreads ids alike but for a few bytes (a generator's, counting
// up in one millisecond; sequence numbers) over the buckets, keeps their
// top 43 bits (what a format 3 run keeps) distinct, tells the kinds and
// every length apart, and changes with any one byte.
func TestIndexHashSpread(t *testing.T) {
	const n = 1 << 20
	for _, form := range []string{"01JEXAMPLE0000%016X", "%d", "order-%08d-of-the-day"} {
		var count [indexBuckets]int
		seen := make(map[uint64]bool, n)
		dup := 0
		for i := range n {
			h := indexHash(indexKindID, []byte(fmt.Sprintf(form, i)))
			count[indexBucket(h)]++
			if seen[h>>indexFragShift] {
				dup++
			}
			seen[h>>indexFragShift] = true
		}
		if dup > 2 {
			t.Errorf("%q: %d of %d ids share their top 43 bits", form, dup, n)
		}
		// A uniform spread puts 512 ± 23 in a bucket.
		if lo, hi := slices.Min(count[:]), slices.Max(count[:]); lo < 400 || hi > 630 {
			t.Errorf("%q: buckets hold %d to %d ids, want about 512", form, lo, hi)
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	hashes := map[uint64]string{}
	for size := range 48 {
		v := make([]byte, size)
		for i := range v {
			v[i] = byte(r.Uint32())
		}
		for _, kind := range []byte{indexKindID, indexKindKey} {
			h := indexHash(kind, v)
			if prev, ok := hashes[h]; ok {
				t.Fatalf("%c %x and %s hash alike", kind, v, prev)
			}
			hashes[h] = fmt.Sprintf("%c %x", kind, v)
			for i := range v {
				for _, bit := range []byte{1, 0x80} {
					w := slices.Clone(v)
					w[i] ^= bit
					if indexHash(kind, w) == h {
						t.Fatalf("%x and %x hash alike", v, w)
					}
				}
			}
		}
	}
	// Zero bytes count: a value and the same with a zero byte more differ.
	if indexHash(indexKindID, []byte("ab")) == indexHash(indexKindID, []byte("ab\x00")) {
		t.Fatal("a trailing zero byte does not change the hash")
	}
}

func BenchmarkIndexHash(b *testing.B) {
	ids := make([][]byte, 1024)
	for i := range ids {
		ids[i] = fmt.Appendf(nil, "01JEXAMPLE00000000%08d", i) // 26 bytes, as pkg/msgid's
	}
	var sink uint64
	b.Run("format3", func(b *testing.B) {
		for b.Loop() {
			for _, id := range ids {
				sink += indexHash(indexKindID, id)
			}
		}
	})
	b.Run("format2", func(b *testing.B) {
		for b.Loop() {
			for _, id := range ids {
				sink += indexHash2(indexKindID, id)
			}
		}
	})
	_ = sink
}

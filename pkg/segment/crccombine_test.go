package segment

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
)

func TestCombineCRC(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var c CRCCombiner
	for _, n := range []int{0, 1, 3, 4, 63, 64, 127, 1000, 1024, 4096, 65536, 1 << 20} {
		for _, m := range []int{0, 1, 28, 100} {
			a := make([]byte, m)
			bb := make([]byte, n)
			for i := range a {
				a[i] = byte(r.Uint32())
			}
			for i := range bb {
				bb[i] = byte(r.Uint32())
			}
			want := crc32.Checksum(append(append([]byte{}, a...), bb...), castagnoli)
			c1, c2 := crc32.Checksum(a, castagnoli), crc32.Checksum(bb, castagnoli)
			if got := combineCRC(c1, c2, n); got != want {
				t.Fatalf("combineCRC(%d, %d) = %#x, want %#x", m, n, got, want)
			}
			for range 2 { // a fresh slot, then a kept one
				if got := c.Combine(c1, c2, n); got != want {
					t.Fatalf("Combine(%d, %d) = %#x, want %#x", m, n, got, want)
				}
			}
		}
	}
}

// TestAppendSummed: a record whose tail CRC is given is byte for byte the
// one Append writes, and a wrong tail CRC makes a record that fails its check.
func TestAppendSummed(t *testing.T) {
	l := openTestLog(t)
	var comb CRCCombiner
	head := []byte("0123456789abcdef")
	for _, n := range []int{4, 100, 200, 1024, 5000} {
		body := bytes.Repeat([]byte{byte(n), 7, 9}, n)[:n]
		tail := n - 4
		plain, summed, wrong := l.NewBatch(), l.NewBatch(), l.NewBatch()
		if _, err := plain.Append(3, head, body); err != nil {
			t.Fatal(err)
		}
		if _, err := summed.AppendSummed(3, head, body, tail, crc32.Checksum(body[4:], castagnoli), &comb); err != nil {
			t.Fatal(err)
		}
		if got, want := batchBytes(summed), plain.chunks[0].data; !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: AppendSummed wrote %x, Append %x", n, got[:12], want[:12])
		}
		if _, err := wrong.AppendSummed(3, head, body, tail, crc32.Checksum(body[4:], castagnoli)^1, &comb); err != nil {
			t.Fatal(err)
		}
		_, _, _, err := ParseRecord(batchBytes(wrong))
		if tail >= minCombineTail && err == nil {
			t.Fatalf("%d bytes: a record with a wrong tail CRC parsed", n)
		}
	}
}

func BenchmarkRecordCRC(b *testing.B) {
	l := openTestLog(b)
	var comb CRCCombiner
	head := make([]byte, 16)
	for _, n := range []int{256, 1024, 16384} {
		body := bytes.Repeat([]byte{1, 2, 3}, n)[:n]
		sum := crc32.Checksum(body[4:], castagnoli)
		batch := l.NewBatch()
		b.Run("append/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for range b.N {
				batch.Reset()
				batch.Append(1, head, body)
			}
		})
		b.Run("summed/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for range b.N {
				batch.Reset()
				batch.AppendSummed(1, head, body, n-4, sum, &comb)
			}
		})
	}
}

func openTestLog(tb testing.TB) *Log {
	l, err := OpenLog(tb.TempDir(), LogOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

// batchBytes returns b's bytes, its chunks and pieces concatenated.
func batchBytes(b *Batch) []byte {
	var out []byte
	for _, c := range b.chunks {
		if !c.vec {
			out = append(out, c.data...)
			continue
		}
		for _, p := range c.iov {
			out = append(out, p...)
		}
	}
	return out
}

// TestAppendSummedWrite: records added with AppendSummed (bodies copied and
// referred to, runs of small ones, across a segment's end, beside Append's)
// land in the log exactly as Append's do, through the mapping and pwritev.
func TestAppendSummedWrite(t *testing.T) {
	for _, noMmap := range []bool{false, true} {
		opts := LogOptions{SegmentSize: 64 << 10, NoMmap: noMmap}
		plainLog, err := OpenLog(t.TempDir(), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer plainLog.Close()
		summedLog, err := OpenLog(t.TempDir(), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer summedLog.Close()
		r := rand.New(rand.NewPCG(3, 4))
		var comb CRCCombiner
		head := []byte("0123456789abcdef")
		pb, sb := plainLog.NewBatch(), summedLog.NewBatch()
		for round := 0; round < 20; round++ {
			pb.Reset()
			sb.Reset()
			for i := 0; i < 1+r.IntN(40); i++ {
				body := make([]byte, 4+r.IntN(3000))
				for j := range body {
					body[j] = byte(r.Uint32())
				}
				sum := crc32.Checksum(body[4:], castagnoli)
				po, err := pb.Append(2, head, body)
				if err != nil {
					t.Fatal(err)
				}
				var so int64
				if r.IntN(5) == 0 {
					so, err = sb.Append(2, head, body)
				} else {
					so, err = sb.AppendSummed(2, head, body, len(body)-4, sum, &comb)
				}
				if err != nil {
					t.Fatal(err)
				}
				if po != so {
					t.Fatalf("offsets %d and %d", po, so)
				}
			}
			if pb.Bytes() != sb.Bytes() {
				t.Fatalf("batches of %d and %d bytes", pb.Bytes(), sb.Bytes())
			}
			if err := plainLog.Write(pb); err != nil {
				t.Fatal(err)
			}
			if err := summedLog.Write(sb); err != nil {
				t.Fatal(err)
			}
		}
		end := plainLog.End()
		if summedLog.End() != end {
			t.Fatalf("noMmap %v: ends %d and %d", noMmap, end, summedLog.End())
		}
		for off := int64(0); off < end; {
			n := min(end-off, 4096, opts.SegmentSize-off%opts.SegmentSize)
			want, got := make([]byte, n), make([]byte, n)
			if err := plainLog.ReadAt(want, off); err != nil {
				t.Fatal(err)
			}
			if err := summedLog.ReadAt(got, off); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("noMmap %v: bytes differ at %d", noMmap, off)
			}
			off += n
		}
	}
}

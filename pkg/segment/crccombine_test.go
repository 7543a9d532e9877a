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
		if !bytes.Equal(plain.chunks[0].data, summed.chunks[0].data) {
			t.Fatalf("%d bytes: AppendSummed wrote %x, Append %x", n, summed.chunks[0].data[:12], plain.chunks[0].data[:12])
		}
		if _, err := wrong.AppendSummed(3, head, body, tail, crc32.Checksum(body[4:], castagnoli)^1, &comb); err != nil {
			t.Fatal(err)
		}
		_, _, _, err := ParseRecord(wrong.chunks[0].data)
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

package segment

import (
	"fmt"
	"testing"
)

// BenchmarkLogWrite compares writing through the mapping with pwrite for
// one small record per Write (a producer waiting for each ack) and for
// batches of records (a pipelining producer, a replica's chunk).
func BenchmarkLogWrite(b *testing.B) {
	for _, records := range []int{1, 4, 16, 64, 256} {
		for _, noMmap := range []bool{false, true} {
			b.Run(fmt.Sprintf("records=%d/nommap=%v", records, noMmap), func(b *testing.B) {
				l, err := OpenLog(b.TempDir(), LogOptions{SegmentSize: 256 << 20, NoMmap: noMmap})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				payload := make([]byte, 300)
				batch := l.NewBatch()
				b.SetBytes(int64(records) * RecordSize(len(payload)))
				for b.Loop() {
					batch.Reset()
					for range records {
						if _, err := batch.Append(1, nil, payload); err != nil {
							b.Fatal(err)
						}
					}
					if err := l.Write(batch); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

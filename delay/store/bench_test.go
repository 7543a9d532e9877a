package store

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAppend measures appends with FlushSync from parallel callers, by
// messages per Append.
func BenchmarkAppend(b *testing.B) {
	for _, batch := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("batch%d", batch), func(b *testing.B) {
			s, err := Open(b.TempDir(), Options{}, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			go func() {
				for d := range s.Due() {
					_ = d
				}
			}()
			msg := encode(b, "bench-message-id", time.Now().Add(time.Hour))
			b.SetBytes(int64(len(msg) * batch))
			b.ReportAllocs()
			b.SetParallelism(16)
			var failed atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				msgs := make([][]byte, batch)
				for i := range msgs {
					msgs[i] = msg
				}
				for pb.Next() {
					res, err := s.AppendContext(context.Background(), msgs)
					if err != nil || res[0].Err != nil {
						failed.Add(1)
					}
				}
			})
			if failed.Load() > 0 {
				b.Fatalf("%d appends failed", failed.Load())
			}
		})
	}
}

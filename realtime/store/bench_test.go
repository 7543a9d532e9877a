package store

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

func benchMsg(b testing.TB, subject string, i int) []byte {
	m := &protocol.Message{Subject: subject, ID: fmt.Sprintf("%016d", i), Created: time.Now()}
	m.Body = make([]byte, 256-m.EncodedSize())
	out, err := protocol.AppendMessage(nil, m, protocol.DefaultLimits)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

func BenchmarkAppendAsync(b *testing.B) {
	opts := testOptions()
	opts.Flush = FlushAsync
	opts.SegmentSize = 1 << 30
	s, err := Open(b.TempDir(), opts, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	batch := make([][]byte, 64)
	for k := range batch {
		batch[k] = benchMsg(b, "bench", k)
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	b.SetBytes(int64(256 * len(batch)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sem <- struct{}{}
		wg.Add(1)
		appendRaw(s, batch, func([]Result) { <-sem; wg.Done() })
	}
	wg.Wait()
}

func BenchmarkPullAck(b *testing.B) {
	opts := testOptions()
	opts.Flush = FlushAsync
	opts.SegmentSize = 1 << 30
	s, err := Open(b.TempDir(), opts, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	s.Pull(PullRequest{Subject: "bench", Group: "g", Consumer: "c0", Max: 1, KnownPullSeq: -1, Earliest: true})
	batch := make([][]byte, 256)
	for k := range batch {
		batch[k] = benchMsg(b, "bench", k)
	}
	total := b.N * 64 * 8
	var wg sync.WaitGroup
	for i := 0; i < total/256+1; i++ {
		wg.Add(1)
		appendRaw(s, batch, func([]Result) { wg.Done() })
	}
	wg.Wait()
	b.ResetTimer()
	for c := 0; c < 8; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			id := fmt.Sprint("c", c)
			known := int64(-1)
			for i := 0; i < b.N; i++ {
				r, err := s.Pull(PullRequest{Subject: "bench", Group: "g", Consumer: id, Max: 64, KnownPullSeq: known})
				if err != nil || len(r.Messages) == 0 {
					return
				}
				first, last := r.Messages[0].PullSeq, r.Messages[len(r.Messages)-1].PullSeq
				known = last
				s.Ack(AckRequest{Subject: "bench", Group: "g", Consumer: id, First: first, Last: last})
			}
		}(c)
	}
	wg.Wait()
}

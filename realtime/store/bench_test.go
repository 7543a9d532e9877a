package store

import (
	"fmt"
	"sync"
	"syscall"
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

// BenchmarkAppendIndexed: what the message index costs a storing store, in
// the process's CPU time (every goroutine's, the index's loop included: the
// benchmark waits for the index to reach the log's end) per message, with
// the index and without (FlushAsync: the syncs' waits are not the point).
// Each op appends 256 messages of 256 bytes with distinct 16-byte ids.
func BenchmarkAppendIndexed(b *testing.B) {
	for _, indexed := range []bool{true, false} {
		b.Run(fmt.Sprint("index=", indexed), func(b *testing.B) {
			opts := testOptions()
			opts.Flush = FlushAsync
			opts.SegmentSize = 1 << 30
			opts.NoMessageIndex = !indexed
			s, err := Open(b.TempDir(), opts, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			batches := make([][][]byte, 256)
			for i := range batches {
				for k := range 256 {
					batches[i] = append(batches[i], benchMsg(b, "bench", i*256+k))
				}
			}
			sem := make(chan struct{}, 16)
			var wg sync.WaitGroup
			cpu0 := processCPU()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				sem <- struct{}{}
				wg.Add(1)
				if err := appendRaw(s, batches[i%len(batches)], func([]Result) { <-sem; wg.Done() }); err != nil {
					b.Fatal(err)
				}
			}
			wg.Wait()
			if indexed {
				s.msgLog.Sync()
				for s.index.end.Load() < s.committedMessages() {
					time.Sleep(time.Millisecond)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N*256), "cpu-ns/msg")
		})
	}
}

// processCPU returns the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

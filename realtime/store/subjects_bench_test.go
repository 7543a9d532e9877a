package store

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user and system time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAppendSubjects appends batches of 256 messages whose subjects
// cycle over 1 or 10,000 subjects (the subjects bench suite's workload,
// without the network), 16 batches in flight, under the default FlushSync.
// The subjects exist before the timer starts. cpu-ns/msg is the process's
// CPU time per message (the caller's validation, the appender and the
// syncer), which the machine's other load moves less than the wall time.
func BenchmarkAppendSubjects(b *testing.B) {
	for _, n := range []int{1, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			opts := testOptions()
			opts.SegmentSize = 1 << 30
			s, err := Open(b.TempDir(), opts, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			const batchSize = 256
			var batches [][][]byte
			for i := 0; i < max(n, 64*batchSize); i += batchSize {
				batch := make([][]byte, batchSize)
				for k := range batch {
					batch[k] = benchMsg(b, fmt.Sprint("bench.s", (i+k)%n), i+k)
				}
				batches = append(batches, batch)
			}
			sem := make(chan struct{}, 16)
			var wg sync.WaitGroup
			appendBatch := func(batch [][]byte) {
				sem <- struct{}{}
				wg.Add(1)
				if err := appendRaw(s, batch, func([]Result) { <-sem; wg.Done() }); err != nil {
					b.Fatal(err)
				}
			}
			for _, batch := range batches { // create every subject
				appendBatch(batch)
			}
			wg.Wait()
			b.SetBytes(256 * batchSize)
			b.ResetTimer()
			cpu := cpuTime(b)
			for i := 0; i < b.N; i++ {
				appendBatch(batches[i%len(batches)])
			}
			wg.Wait()
			b.StopTimer() // not Close: it checkpoints every consume log
			cpu = cpuTime(b) - cpu
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batchSize), "ns/msg")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*batchSize), "cpu-ns/msg")
		})
	}
}

package store

import (
	"os"
	"testing"
)

// BenchmarkReplicateTail: a replica copies 20,000 messages of 256 bytes in
// chunks of about 256 KiB, each told the committed end of the one before
// (the steady state of a --wait-slave pair: every chunk is a tentative
// tail, indexed when the next arrives). On tmpfs where there is one, so
// the figure is the replica's CPU, not the disk's flushes.
func BenchmarkReplicateTail(b *testing.B) {
	dir := os.Getenv("QMQ_BENCH_TMPFS")
	if dir == "" {
		if _, err := os.Stat("/dev/shm"); err == nil {
			dir = "/dev/shm"
		}
	}
	tmp := func() string {
		d, err := os.MkdirTemp(dir, "replica-bench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	opts := testOptions()
	m, err := Open(tmp(), opts, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	const msgs, perSend = 20000, 256
	batch := make([][]byte, perSend)
	for i := 0; i < msgs; i += perSend {
		for k := range batch {
			batch[k] = benchMsg(b, "bench", i+k)
		}
		if _, err := m.Append(b.Context(), batch); err != nil {
			b.Fatal(err)
		}
	}
	end, _ := m.CommittedEnds()
	var chunks []LogChunk
	for from := int64(0); from < end; {
		c, err := m.Source().ReadMessageTailInto(nil, from, 256<<10)
		if err != nil {
			b.Fatal(err)
		}
		c.End = from
		chunks = append(chunks, c)
		from = c.Offset + int64(len(c.Data))
	}
	if len(chunks) < 10 {
		b.Fatalf("%d chunks of %d bytes", len(chunks), end)
	}
	ropts := opts
	ropts.Replica = true
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		r, err := Open(tmp(), ropts, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for _, c := range chunks {
			if err := r.Replica().ReplicateMessages(c); err != nil {
				b.Fatal(err)
			}
		}
		if err := r.Replica().ReplicateMessages(LogChunk{End: end, Offset: end}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if c, _ := r.CommittedEnds(); c != end {
			b.Fatalf("replica indexed up to %d of %d", c, end)
		}
		r.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*msgs), "ns/msg")
	b.ReportMetric(0, "ns/op")
}

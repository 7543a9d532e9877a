package main

// The produce-sizes suite: how much payload our durable produce path puts
// down against what the disk takes, in the same run.
//
// The disk: a fresh file in the scratch directory, appended 1 MiB at a
// time, each write followed by fdatasync, for 3 s (at most 2 GiB), measured
// before and after our runs; the ratio is taken against the faster of the
// two (the conservative one). Each size's run and the second probe start
// on settled disks (settleRound, as the rounds of other suites): unsettled,
// the probe after our runs read 357-394 MB/s where a settled one read
// 890-945 (2026-12-04), so it measured the wake of our writes, not the disk.
//
// Ours, for each body size in produceSizes: a fresh qmq-realtime with its
// default durable flush (fdatasync before every ack, group commit), one
// producer process (one core, GOMAXPROCS=1, one connection) sending for 5 s
// with producer.SendBatch (batches the caller builds, as the produce suite
// sends; SendAsync's per-message queueing cost the producer ~35 % more CPU a
// message at 1 KiB, and the producer's core was one of the two the run
// used) from produceSizesInflight (64) goroutines, each sending batches of
// up to 256 messages and 1 MiB (sizeBatch) and waiting for their answer:
// our best pipelining (not the bench's default of 16 in flight, which the
// peer suites use). With 16 in flight a 1 KiB run waited
// on its group commits (~13 ms a request: 16 requests of 256 KiB took ~7
// commits of ~2 ms, both cores not yet busy); 48–64 took 25–40 % more at
// 1 KiB and the same at 16 KiB, more gave nothing (realtime/store/NOTES.md,
// "Payload against the disk"). Payload MB/s counts bodies only (MB = 10⁶
// bytes).
//
//	produce_sizes_disk_1m_mb_per_s    1 MiB fresh append + fdatasync (the faster run)
//	produce_<size>_mb_per_s           ours, payload, for size 256b, 1k, 4k, 16k, 64k
//	produce_<size>_msgs_per_s         ours, messages
//	produce_<size>_disk_ratio         payload / disk (produce_1k_disk_ratio: target ≥ 0.8)

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

const (
	produceSizesDuration = 5 * time.Second
	diskProbeDuration    = 3 * time.Second
	diskProbeMax         = 2 << 30
	diskProbeChunk       = 1 << 20
	produceSizesInflight = 64
)

// produceSizes are the body sizes the suite sends, with their metric names.
var produceSizes = []struct {
	name  string
	bytes int
}{{"256b", 256}, {"1k", 1 << 10}, {"4k", 4 << 10}, {"16k", 16 << 10}, {"64k", 64 << 10}}

func init() { register("produce-sizes", runProduceSizes) }

func runProduceSizes(env *Env) error {
	before, err := appendSyncRate(filepath.Join(env.Dir, "disk-before"), diskProbeChunk, diskProbeDuration)
	if err != nil {
		return err
	}
	type result struct {
		name      string
		mbs, msgs float64
	}
	var results []result
	for _, sz := range produceSizes {
		env.settleRound()
		msgs, err := env.produceOursWith(filepath.Join(env.Dir, "qmq-"+sz.name), produceSizesDuration,
			append([]string{"-size", fmt.Sprint(sz.bytes)}, depthArgs(sizeBatch(sz.bytes), produceSizesInflight)...))
		if err != nil {
			return fmt.Errorf("%s bodies: %w", sz.name, err)
		}
		results = append(results, result{sz.name, msgs * float64(sz.bytes) / 1e6, msgs})
	}
	env.settleRound()
	after, err := appendSyncRate(filepath.Join(env.Dir, "disk-after"), diskProbeChunk, diskProbeDuration)
	if err != nil {
		return err
	}
	env.Logf("disk: 1 MiB fresh append + fdatasync %.0f MB/s before our runs, %.0f MB/s after", before, after)
	disk := max(before, after)
	env.Metric("produce_sizes_disk_1m_mb_per_s", disk, "MB/s")
	for _, r := range results {
		env.Metric("produce_"+r.name+"_mb_per_s", r.mbs, "MB/s")
		env.Metric("produce_"+r.name+"_msgs_per_s", r.msgs, "msg/s")
		env.Metric("produce_"+r.name+"_disk_ratio", r.mbs/disk, "x")
	}
	return nil
}

// sizeBatch is how many messages of body bytes one SendBatch call of the
// suite sends: 256, or fewer so that a request stays within 1 MiB (its
// encoded messages: body plus sizeBatchOverhead each).
func sizeBatch(body int) int {
	return max(1, min(256, (1<<20)/(body+sizeBatchOverhead)))
}

// sizeBatchOverhead bounds an encoded message's bytes beyond its body (the
// header, id and subject of the worker's messages).
const sizeBatchOverhead = 128

// appendSyncRate appends chunk-sized writes to a new file at path, each
// followed by fdatasync, for d (or until diskProbeMax bytes), and returns
// MB/s (10⁶ bytes). The file is removed afterwards.
func appendSyncRate(path string, chunk int, d time.Duration) (float64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	defer os.Remove(path)
	defer f.Close()
	buf := make([]byte, chunk)
	for i := range buf {
		buf[i] = byte(i * 7) // not zeros: nothing below may shortcut them
	}
	var written int64
	start := time.Now()
	for time.Since(start) < d && written < diskProbeMax {
		if _, err := f.Write(buf); err != nil {
			return 0, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return 0, err
		}
		written += int64(chunk)
	}
	return float64(written) / time.Since(start).Seconds() / 1e6, nil
}

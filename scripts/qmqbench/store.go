package main

// The store suite measures realtime/store on the machine's disk with
// 256-byte messages, at the library's defaults: no page cache window (the
// broker drops its log's cache behind 1 GiB; with that window here the
// async rounds ran 1.90-1.98 M msg/s against 1.25-1.43 M and the ratio read
// 0.47-0.57 against 0.61, and the latency suite after it read e2e p99
// 3.4-7.8 ms against 3.5-3.8: realtime/store/NOTES.md, "The page cache
// window"):
//
//	store_append_async_msgs_per_s   one appender (AppendAsync, batches of 64,
//	                                 at most 16 batches in flight), FlushAsync
//	store_append_sync_msgs_per_s    64 appenders each appending batches of 32
//	                                 and waiting for the result, FlushSync
//	store_sync_vs_async_ratio       the 64 × 32 workload, sync over async, in
//	                                 alternating one-second rounds (4 each),
//	                                 each started on a settled disk
//	                                 (settleSync: the async rounds write
//	                                 ~400 MB a second, and the fdatasyncs of
//	                                 a sync round right after read 4-5 ms at
//	                                 p99 against 0.3 ms; see syncprobe.go)
//	store_pull_ack_msgs_per_s       one group, 8 consumers pulling batches of
//	                                 64 and acking each batch
//	store_recovery_s                Open of a 2 GiB message log after SIGKILL
//	                                 with the last checkpoint taken before the
//	                                 log was written (see store_recovery.go)

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/realtime/store"
)

func init() {
	register("store", runStoreSuite)
}

const benchMsgSize = 256

// benchMessage returns an encoded message of exactly benchMsgSize bytes.
func benchMessage(subject string, i int) []byte {
	m := &protocol.Message{Subject: subject, ID: fmt.Sprintf("%016d", i), Created: time.Now()}
	m.Body = make([]byte, benchMsgSize-m.EncodedSize())
	b, err := protocol.AppendMessage(nil, m, protocol.DefaultLimits)
	if err != nil {
		panic(err)
	}
	return b
}

func benchStoreOptions(flush store.FlushPolicy) store.Options {
	return store.Options{
		Flush:              flush,
		CheckpointInterval: -1,
		RetentionInterval:  -1,
		RetentionAge:       -1,
	}
}

func runStoreSuite(env *Env) error {
	async1, err := benchAppendOne(env)
	if err != nil {
		return err
	}
	env.Metric("store_append_async_msgs_per_s", async1, "msg/s")
	env.settleRound()
	asyncMany, syncMany, err := benchAppendMany(env)
	if err != nil {
		return err
	}
	env.Logf("64 x 32 async: %.0f msg/s", asyncMany)
	env.Metric("store_append_sync_msgs_per_s", syncMany, "msg/s")
	env.Metric("store_sync_vs_async_ratio", syncMany/asyncMany, "x")
	pullAck, err := benchPullAck(env)
	if err != nil {
		return err
	}
	env.Metric("store_pull_ack_msgs_per_s", pullAck, "msg/s")
	rec, err := benchRecovery(env)
	if err != nil {
		return err
	}
	env.Metric("store_recovery_s", rec, "s")
	return nil
}

// benchDir returns the directory of one of the suite's stores. It is left
// for the run's end to remove with the rest of the scratch directory (see
// main): deleting a store's gigabytes here issued their discards, and the
// latency suite run next read e2e p99 50-59 ms against 3.7 ms on its own
// (2026-12-04), with the fdatasync probe reading quiet before it.
func benchDir(env *Env, name string) string {
	return filepath.Join(env.Dir, name)
}

// benchAppendOne: one goroutine, AppendAsync with a window of 16 batches.
func benchAppendOne(env *Env) (float64, error) {
	dir := benchDir(env, "append-one")
	s, err := store.Open(dir, benchStoreOptions(store.FlushAsync), nil)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	const batch, window = 64, 16
	const total = 4_000_000
	msgs := make([][][]byte, 256)
	for i := range msgs {
		msgs[i] = make([][]byte, batch)
		for k := range msgs[i] {
			msgs[i][k] = benchMessage("bench", i*batch+k)
		}
	}
	sem := make(chan struct{}, window)
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < total/batch; i++ {
		sem <- struct{}{}
		wg.Add(1)
		// The store's callers parse and check what they append (store.Views),
		// as the broker's send handler does: part of the work measured.
		views, results := store.Views(msgs[i%len(msgs)], protocol.DefaultLimits)
		if err := s.AppendAsync(views, results, func(rs []store.Result) {
			for _, r := range rs {
				if r.Err != nil {
					failed.Add(1)
				}
			}
			<-sem
			wg.Done()
		}); err != nil {
			return 0, err
		}
	}
	wg.Wait()
	el := time.Since(start)
	if failed.Load() > 0 {
		return 0, fmt.Errorf("%d appends failed", failed.Load())
	}
	return float64(total) / el.Seconds(), nil
}

// benchAppendMany runs the 64 × 32 workload (64 goroutines appending
// batches of 32 and waiting for each result) against a FlushAsync and a
// FlushSync store, alternating one-second rounds so that both see the same
// machine load, and returns each one's rate.
func benchAppendMany(env *Env) (async, sync float64, err error) {
	stores := map[store.FlushPolicy]*store.Store{}
	for _, flush := range []store.FlushPolicy{store.FlushAsync, store.FlushSync} {
		dir := benchDir(env, "append-many-"+string(flush))
		s, err := store.Open(dir, benchStoreOptions(flush), nil)
		if err != nil {
			return 0, 0, err
		}
		defer s.Close()
		stores[flush] = s
	}
	counts := map[store.FlushPolicy]int64{}
	times := map[store.FlushPolicy]time.Duration{}
	for round := 0; round < 4; round++ {
		for _, flush := range []store.FlushPolicy{store.FlushAsync, store.FlushSync} {
			// Not settleRound: the two open stores' own loops keep the
			// disks from a second without I/O (it waited its 10 s
			// before every round); the fdatasync probe is what matters.
			if err := env.settleSync("before a round", 20*time.Second); err != nil {
				return 0, 0, err
			}
			n, el, err := appendRound(stores[flush], time.Second)
			if err != nil {
				return 0, 0, err
			}
			counts[flush] += n
			times[flush] += el
		}
	}
	st := stores[store.FlushSync].Stats()
	env.Logf("64 x 32 sync: %d messages, %d fdatasyncs (%.0f messages each)", counts[store.FlushSync], st.Syncs,
		float64(counts[store.FlushSync])/float64(max(st.Syncs, 1)))
	async = float64(counts[store.FlushAsync]) / times[store.FlushAsync].Seconds()
	sync = float64(counts[store.FlushSync]) / times[store.FlushSync].Seconds()
	return async, sync, nil
}

// appendRound runs the 64 × 32 workload for d and returns how many messages
// were stored and how long it took.
func appendRound(s *store.Store, d time.Duration) (int64, time.Duration, error) {
	const appenders, batch = 64, 32
	var count atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for a := 0; a < appenders; a++ {
		wg.Add(1)
		go func(a int) {
			defer wg.Done()
			msgs := make([][]byte, batch)
			for k := range msgs {
				msgs[k] = benchMessage(fmt.Sprintf("bench%d", a%8), a*batch+k)
			}
			for time.Now().Before(deadline) {
				rs, err := s.Append(context.Background(), msgs)
				if err != nil {
					firstErr.Store(err)
					return
				}
				for _, r := range rs {
					if r.Err != nil {
						firstErr.Store(r.Err)
						return
					}
				}
				count.Add(batch)
			}
		}(a)
	}
	wg.Wait()
	el := time.Since(start)
	if err, ok := firstErr.Load().(error); ok {
		return 0, 0, err
	}
	return count.Load(), el, nil
}

// benchPullAck: one group, 8 consumers pulling 64 at a time and acking.
func benchPullAck(env *Env) (float64, error) {
	dir := benchDir(env, "pull-ack")
	s, err := store.Open(dir, benchStoreOptions(store.FlushAsync), nil)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	const total = 3_000_000 / 256 * 256
	if _, err := s.Pull(store.PullRequest{Subject: "bench", Group: "g", Consumer: "c0", Max: 1, KnownPullSeq: -1, Earliest: true}); err != nil {
		return 0, err
	}
	batch := make([][]byte, 256)
	for k := range batch {
		batch[k] = benchMessage("bench", k)
	}
	var wg sync.WaitGroup
	for i := 0; i < total/len(batch); i++ {
		wg.Add(1)
		views, results := store.Views(batch, protocol.DefaultLimits)
		if err := s.AppendAsync(views, results, func([]store.Result) { wg.Done() }); err != nil {
			return 0, err
		}
	}
	wg.Wait()
	if err := s.Checkpoint(); err != nil {
		return 0, err
	}
	var count atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	for c := 0; c < 8; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			id := fmt.Sprintf("c%d", c)
			known := int64(-1)
			for {
				r, err := s.Pull(store.PullRequest{Subject: "bench", Group: "g", Consumer: id, Max: 64, KnownPullSeq: known})
				if err != nil {
					firstErr.Store(err)
					return
				}
				if len(r.Messages) == 0 {
					return
				}
				first, last := r.Messages[0].PullSeq, r.Messages[len(r.Messages)-1].PullSeq
				known = last
				if _, err := s.Ack(store.AckRequest{Subject: "bench", Group: "g", Consumer: id, First: first, Last: last}); err != nil {
					firstErr.Store(err)
					return
				}
				count.Add(int64(len(r.Messages)))
			}
		}(c)
	}
	wg.Wait()
	el := time.Since(start)
	if err, ok := firstErr.Load().(error); ok {
		return 0, err
	}
	if count.Load() < total {
		return 0, fmt.Errorf("consumed %d of %d", count.Load(), total)
	}
	return float64(count.Load()) / el.Seconds(), nil
}

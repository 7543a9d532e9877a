package main

// The produce suite: one producer process sends 256-byte messages for a
// fixed time (8 s; JetStream: a fixed count) to each system in turn, in the
// same run. Every client runs in a process of its own on one core
// (GOMAXPROCS=1) with one connection.
//
// Ours: qmq-realtime with its default durable flush (every message is
// fdatasynced before its ack; group commit), the producer (pkg producer)
// sending batches with SendBatch (as bench_writer sends MPUBs: a batch of
// messages built by the caller, one request, its answer waited for), at
// two pipelining depths:
//   - its own best: 16 goroutines, each sending batches of 512 messages
//     (16 requests of ~170 KB in flight; against 16 × 256 the broker spent
//     ~16 % less CPU a message, 1.11 against 1.32 µs, in alternating runs;
//     24 × 512, 32 × 256/512 and 16 × 1024 did no better: producer/NOTES.md);
//   - each peer tool's depth, like for like: one goroutine sending batches
//     of 200 (bench_writer's), and of 500 (nats bench's).
// And once with SendAsync (one call a message, the producer batches them:
// batches of 256, 16 in flight), its own figure: produce_async_*.
//
// nsqd (v1.3.0): bench_writer, its own tool, at its best (and default):
// MPUB batches of 200, one in flight (it waits for each reply), one
// connection. Twice:
//   - in memory: --mem-queue-size=20,000,000, above what the run sends;
//     nsqd's /stats must show no message in its disk queue (backend_depth),
//     or the suite fails. Warm, as a long-running nsqd: each measured run is
//     the second in one nsqd process, the topic emptied after the first, so
//     its Go heap already holds a backlog (a fresh nsqd spends ~40 % of its
//     CPU faulting in new heap pages on this VM; produceNSQWarm). The first,
//     fresh run is the second figure, produce_*_cold_*;
//   - nsqd's defaults: a memory queue of 10,000 and the rest to its disk
//     queue (fsync every 2,500 messages or 2 s).
//
// JetStream (nats-server v2.15.2 -js, file storage, one replica), `nats
// bench js pub async` (publishes a window of 500 messages, each its own
// publish, then waits for their 500 acks) and `js pub fast` (fast batch
// publish, batches of 500, one ack outstanding): its best of the two is
// its figure. Twice:
//   - sync_interval at its default: JetStream fsyncs every 2 minutes, so
//     none of its figure is durable on ack (stated beside the figures as
//     produce_jetstream_sync_interval_s);
//   - sync_interval: always (fsync after every write), durable like ours:
//     js pub async, 10,000 messages.
//
// Ours at its own best and nsqd in memory run in three alternating pairs
// (ours then nsqd, nsqd then ours, ours then nsqd; fresh data directories,
// each removed and the disks left to go quiet after its run): their
// figures are the means of the three runs a side, since the machine's
// speed moves by up to a third from one 8 s run to the next (the same
// build made 456 k to 691 k msg/s). The other runs run once.
//
//	produce_msgs_per_s                     ours, 16 × 512 in flight (mean of three)
//	produce_async_msgs_per_s               ours with SendAsync, 16 × 256 in flight
//	produce_async_vs_nsqd_mem_ratio        SendAsync / nsqd in memory
//	produce_depth200_msgs_per_s            ours, 1 × 200 in flight
//	produce_depth500_msgs_per_s            ours, 1 × 500 in flight
//	produce_nsqd_mem_msgs_per_s            nsqd in memory, warm (mean of three)
//	produce_vs_nsqd_mem_ratio              ours / nsqd in memory (target ≥ 1.0)
//	produce_nsqd_mem_cold_msgs_per_s       nsqd in memory, a fresh process's first run
//	produce_vs_nsqd_mem_cold_ratio         ours / nsqd in memory, cold
//	produce_depth200_vs_nsqd_mem_ratio     like for like (depth 200) / nsqd in memory
//	produce_nsqd_disk_msgs_per_s           nsqd defaults (disk-backed queue)
//	produce_vs_nsqd_disk_ratio             ours / nsqd defaults (target ≥ 2.0)
//	produce_depth200_vs_nsqd_disk_ratio    like for like / nsqd defaults
//	produce_jetstream_sync_interval_s      JetStream's default sync interval (120)
//	produce_jetstream_msgs_per_s           JetStream, default sync interval
//	produce_vs_jetstream_ratio             ours / JetStream
//	produce_depth500_vs_jetstream_ratio    like for like (depth 500) / JetStream
//	produce_jetstream_synced_msgs_per_s    JetStream, sync_interval: always
//	produce_vs_jetstream_synced_ratio      ours / JetStream synced (target ≥ 5.0)

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/producer"
)

const (
	produceDuration = 8 * time.Second
	messageSize     = 256
	// jetStreamProduceMsgs and jetStreamSyncedMsgs are the counts nats bench
	// sends (it is count-based): ~8 s at the default sync interval, ~6 s
	// with sync_interval: always (~5 k msg/s here on a quiet disk, ~200 on a busy one).
	jetStreamProduceMsgs = 1_000_000
	jetStreamSyncedMsgs  = 10_000
	// nsqBatch is bench_writer's default MPUB batch; jetStreamBatch nats
	// bench's default window and batch.
	nsqBatch       = 200
	jetStreamBatch = 500
	// producePairRounds is how many alternating pairs of runs (ours, nsqd
	// in memory) make the headline figures: this host's speed moves by a
	// third from one 8 s run to the next.
	producePairRounds = 3
	// ownBestBatch is the batch of our own-best run (16 in flight).
	ownBestBatch = 512
)

func init() {
	register("produce", runProduce)
	registerWorker("produce", produceWorker)
}

func runProduce(env *Env) error {
	ours, nsqMem, nsqCold, err := env.producePairs()
	if err != nil {
		return err
	}
	env.Metric("produce_msgs_per_s", ours, "msg/s")
	async, err := env.produceOurs(filepath.Join(env.Dir, "qmq-async"), produceDuration)
	if err != nil {
		return err
	}
	env.Metric("produce_async_msgs_per_s", async, "msg/s")
	d200, err := env.produceOursWith(filepath.Join(env.Dir, "qmq200"), produceDuration, depthArgs(nsqBatch, 1))
	if err != nil {
		return err
	}
	env.Metric("produce_depth200_msgs_per_s", d200, "msg/s")
	d500, err := env.produceOursWith(filepath.Join(env.Dir, "qmq500"), produceDuration, depthArgs(jetStreamBatch, 1))
	if err != nil {
		return err
	}
	env.Metric("produce_depth500_msgs_per_s", d500, "msg/s")

	env.Metric("produce_nsqd_mem_msgs_per_s", nsqMem, "msg/s")
	env.Metric("produce_vs_nsqd_mem_ratio", ours/nsqMem, "x")
	env.Metric("produce_async_vs_nsqd_mem_ratio", async/nsqMem, "x")
	env.Metric("produce_nsqd_mem_cold_msgs_per_s", nsqCold, "msg/s")
	env.Metric("produce_vs_nsqd_mem_cold_ratio", ours/nsqCold, "x")
	env.Metric("produce_depth200_vs_nsqd_mem_ratio", d200/nsqMem, "x")
	nsqDisk, err := env.produceNSQDefaults(filepath.Join(env.Dir, "nsq-disk"))
	if err != nil {
		return err
	}
	env.Metric("produce_nsqd_disk_msgs_per_s", nsqDisk, "msg/s")
	env.Metric("produce_vs_nsqd_disk_ratio", ours/nsqDisk, "x")
	env.Metric("produce_depth200_vs_nsqd_disk_ratio", d200/nsqDisk, "x")

	env.Metric("produce_jetstream_sync_interval_s", jetStreamSyncDefault.Seconds(), "s")
	js, err := env.produceJetStream(filepath.Join(env.Dir, "nats"), "", jetStreamProduceMsgs)
	if err != nil {
		return err
	}
	env.Metric("produce_jetstream_msgs_per_s", js, "msg/s")
	env.Metric("produce_vs_jetstream_ratio", ours/js, "x")
	env.Metric("produce_depth500_vs_jetstream_ratio", d500/js, "x")
	synced, err := env.produceJetStream(filepath.Join(env.Dir, "nats-synced"), "always", jetStreamSyncedMsgs)
	if err != nil {
		return err
	}
	env.Metric("produce_jetstream_synced_msgs_per_s", synced, "msg/s")
	env.Metric("produce_vs_jetstream_synced_ratio", ours/synced, "x")
	return nil
}

// producePairs runs ours (SendBatch, 16 × 512 in flight) and nsqd in memory
// (produceNSQWarm: warm, and cold from the same process's first run) in
// producePairRounds alternating pairs (ours first, then nsqd first, …),
// each run on a fresh data directory removed after it (settleRound), and
// returns each side's mean rate.
func (e *Env) producePairs() (ours, nsq, cold float64, err error) {
	for round := range producePairRounds {
		var o, n float64
		for k := range 2 {
			if (round+k)%2 == 0 {
				dir := filepath.Join(e.Dir, fmt.Sprintf("qmq-%d", round))
				o, err = e.produceOursWith(dir, produceDuration, depthArgs(ownBestBatch, 16))
				e.dropRun(dir)
			} else {
				dir := filepath.Join(e.Dir, fmt.Sprintf("nsq-mem-%d", round))
				var c float64
				n, c, err = e.produceNSQWarm(dir)
				cold += c / producePairRounds
				e.dropRun(dir)
			}
			if err != nil {
				return 0, 0, 0, err
			}
		}
		e.Logf("pair %d: ours %.0f msg/s, nsqd in memory %.0f msg/s (%.3f)", round, o, n, o/n)
		ours += o / producePairRounds
		nsq += n / producePairRounds
	}
	return ours, nsq, cold, nil
}

// depthArgs are the produce worker's flags for SendBatch calls of batch
// messages from inflight goroutines.
func depthArgs(batch, inflight int) []string {
	return []string{"-api", "batch", "-batch", fmt.Sprint(batch), "-inflight", fmt.Sprint(inflight)}
}

func (e *Env) produceOurs(dir string, d time.Duration, brokerArgs ...string) (float64, error) {
	return e.produceOursWith(dir, d, nil, brokerArgs...)
}

// produceOursWith runs the produce worker with workerArgs for d against a
// broker started with brokerArgs.
func (e *Env) produceOursWith(dir string, d time.Duration, workerArgs []string, brokerArgs ...string) (float64, error) {
	b, addr, err := e.startRealtime(dir, brokerArgs...)
	if err != nil {
		return 0, err
	}
	defer b.stop()
	var res rateResult
	args := append([]string{"-addr", addr, "-duration", d.String(), "-subjects", "1"}, workerArgs...)
	if err := runWorker("produce", &res, args...); err != nil {
		return 0, err
	}
	if res.Failed > 0 {
		return 0, fmt.Errorf("%d sends failed", res.Failed)
	}
	e.Logf("qmq %v: %d messages in %v", workerArgs, res.Messages, res.Elapsed)
	return res.rate(), nil
}

func produceWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("produce", flag.ContinueOnError)
	addr := fs.String("addr", "", "broker address")
	d := fs.Duration("duration", produceDuration, "how long to send")
	subjects := fs.Int("subjects", 1, "spread messages over this many subjects")
	count := fs.Int64("count", 0, "send exactly this many messages (0: send for -duration)")
	subject := fs.String("subject", "bench.s", "subject prefix")
	inflight := fs.Int("inflight", 16, "send requests in flight per broker group")
	batch := fs.Int("batch", 256, "messages per send request")
	size := fs.Int("size", messageSize, "message body size in bytes")
	api := fs.String("api", "async", "async: SendAsync per message; batch: -inflight goroutines, each calling SendBatch with -batch messages at a time")
	sec := addClientSecurity(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	opts, err := sec.producer()
	if err != nil {
		return nil, err
	}
	p, err := producer.New(append(opts, producer.WithBrokers(*addr), producer.WithQueueSize(50000), producer.WithMaxInFlight(*inflight),
		producer.WithBatch(*batch, 1<<20))...)
	if err != nil {
		return nil, err
	}
	names := make([]string, *subjects)
	for i := range names {
		names[i] = fmt.Sprintf("%s%d", *subject, i)
	}
	body := make([]byte, *size)
	var ok, failed atomic.Int64
	cb := func(_ *producer.Message, err error) {
		if err != nil {
			failed.Add(1)
		} else {
			ok.Add(1)
		}
	}
	start := time.Now()
	deadline := start.Add(*d)
	if *api == "batch" {
		return produceBatches(p, names, body, *inflight, *batch, *count, deadline, start)
	}
	for i := 0; ; i++ {
		if *count > 0 {
			if int64(i) >= *count {
				break
			}
		} else if i&1023 == 0 && time.Now().After(deadline) {
			break
		}
		if err := p.SendAsync(&producer.Message{Subject: names[i%len(names)], Body: body}, cb); err != nil {
			return nil, err
		}
	}
	if err := p.Close(context.Background()); err != nil {
		return nil, err
	}
	return rateResult{Messages: ok.Load(), Failed: failed.Load(), Elapsed: time.Since(start)}, nil
}

// produceBatches sends with producer.SendBatch from inflight goroutines,
// batch messages a call, until count messages were sent (0: until
// deadline), and closes p.
func produceBatches(p *producer.Producer, names []string, body []byte, inflight, batch int, count int64, deadline, start time.Time) (any, error) {
	var ok, failed, taken atomic.Int64
	var wg sync.WaitGroup
	for g := range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs := make([]producer.Message, batch)
			ptrs := make([]*producer.Message, batch)
			for n := 0; ; n++ {
				if count > 0 {
					if taken.Add(int64(batch)) > count {
						return
					}
				} else if time.Now().After(deadline) {
					return
				}
				for i := range msgs {
					msgs[i] = producer.Message{Subject: names[(g+n+i)%len(names)], Body: body}
					ptrs[i] = &msgs[i]
				}
				errs := p.SendBatch(context.Background(), ptrs)
				bad := 0
				for _, err := range errs {
					if err != nil {
						bad++
					}
				}
				ok.Add(int64(batch - bad))
				failed.Add(int64(bad))
			}
		}()
	}
	wg.Wait()
	if err := p.Close(context.Background()); err != nil {
		return nil, err
	}
	return rateResult{Messages: ok.Load(), Failed: failed.Load(), Elapsed: time.Since(start)}, nil
}

// produceNSQDefaults runs bench_writer for produceDuration against nsqd
// with its default settings (a memory queue of 10,000, the rest to its
// disk queue).
func (e *Env) produceNSQDefaults(dir string) (float64, error) {
	p, tcp, httpAddr, err := e.startNSQDWith(dir, nsqdDefaultQueue)
	if err != nil {
		return 0, err
	}
	defer p.stop()
	rate, out, err := e.benchWriter(tcp)
	if err != nil {
		return 0, err
	}
	took, spill := nsqMemoryOnly(httpAddr)
	mode := "defaults (disk-backed queue)"
	if errors.Is(spill, errNSQDSpilled) {
		mode += ", messages in its disk queue"
	} else if spill != nil {
		return 0, spill
	}
	e.Logf("nsqd %s: took %d messages; %s", mode, took, lastLine(out))
	return rate, nil
}

// produceNSQWarm runs bench_writer twice against one nsqd in memory,
// emptying its topic after each run: cold is the first run (a fresh nsqd),
// warm the second. In memory nsqd keeps every message on its Go heap (~430
// B each) and bench_writer's topic has no channel to drain it, so a fresh
// nsqd grows its heap by ~1.5 GB in 8 s; on this VM a fresh 4 KiB page
// costs a fault of ~10 µs (300–400 k faults a run, ~40 % of nsqd's CPU in
// the kernel), so cold reads 360–460 k msg/s. A long-running nsqd already
// holds the heap of its past backlog, as the second run does up to what the
// first sent (it read 680–720 k). The heap is not pre-grown further: a third
// run after a longer second one read 860–930 k in some runs and 310–460 k in
// others, as the Go runtime had handed the freed heap back to the kernel
// and faulted it in again (GODEBUG=madvdontneed=0 did not prevent it). Each
// run's page faults are logged.
func (e *Env) produceNSQWarm(dir string) (warm, cold float64, err error) {
	p, tcp, httpAddr, err := e.startNSQDWith(dir, nsqdMemQueue)
	if err != nil {
		return 0, 0, err
	}
	defer p.stop()
	pid := p.cmd.Process.Pid
	var rates [2]float64
	for run := range rates {
		faults := processFaults(pid)
		rate, out, err := e.benchWriter(tcp)
		if err != nil {
			return 0, 0, err
		}
		faults = processFaults(pid) - faults
		took, err := nsqMemoryOnly(httpAddr)
		if err != nil {
			return 0, 0, err
		}
		e.Logf("nsqd in memory, run %d of 2: took %d messages in all, %d page faults in this run; %s", run+1, took, faults, lastLine(out))
		if err := nsqEmptyTopic(httpAddr, nsqTopic); err != nil {
			return 0, 0, err
		}
		rates[run] = rate
	}
	return rates[1], rates[0], nil
}

// nsqTopic is the topic the nsqd suites publish to and read from.
const nsqTopic = "sub_bench"

// benchWriter runs bench_writer (one core, MPUB batches of nsqBatch) for
// produceDuration against nsqd at tcp and returns its rate and output.
func (e *Env) benchWriter(tcp string) (float64, string, error) {
	bw, err := e.peerBin("bench_writer")
	if err != nil {
		return 0, "", err
	}
	out, err := runToolEnv(context.Background(), []string{"GOMAXPROCS=1"}, bw, "--nsqd-tcp-address="+tcp, "--size=256",
		fmt.Sprintf("--batch-size=%d", nsqBatch), "--runfor="+produceDuration.String(), "--topic="+nsqTopic)
	if err != nil {
		return 0, out, err
	}
	rate, err := parseRate(nsqOpsRe, out)
	return rate, out, err
}

// produceJetStream runs nats bench js pub (async and, at the default sync
// interval, fast) with msgs messages against nats-server with
// sync_interval syncInterval ("" for its default) and returns the best rate.
func (e *Env) produceJetStream(dir, syncInterval string, msgs int) (float64, error) {
	p, addr, err := e.startNATSWith(dir, syncInterval)
	if err != nil {
		return 0, err
	}
	defer p.stop()
	nats, err := e.peerBin("nats")
	if err != nil {
		return 0, err
	}
	label := "sync_interval default (" + jetStreamSyncDefault.String() + ")"
	if syncInterval != "" {
		label = "sync_interval " + syncInterval
	}
	modes := []string{"async"}
	if syncInterval == "" {
		modes = append(modes, "fast")
	}
	best := 0.0
	for _, mode := range modes {
		out, err := runToolEnv(context.Background(), []string{"GOMAXPROCS=1"}, nats, "--no-context", "-s", "nats://"+addr,
			"bench", "js", "pub", mode, "js.bench", "--size", "256", "--msgs", fmt.Sprint(msgs), "--batch", fmt.Sprint(jetStreamBatch),
			"--create", "--purge", "--storage", "file", "--no-progress")
		if err != nil {
			return 0, err
		}
		r, err := parseRate(natsMsgRe, out)
		if err != nil {
			return 0, err
		}
		e.Logf("jetstream %s, js pub %s: %.0f msg/s; %s", label, mode, r, lastLine(out))
		best = max(best, r)
	}
	return best, nil
}

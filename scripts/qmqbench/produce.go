package main

// The produce suite: one producer process sends 256-byte messages as fast as
// it can for a fixed time, to our broker with its default durable flush
// (fsync before every ack, group commit), to nsqd (MPUB batches of 200,
// in-memory queue: bench_writer) and to NATS JetStream on file storage
// (`nats bench js pub async`), each in the same run.
//
//	produce_msgs_per_s             ours: batched async producer (pkg producer)
//	produce_nsqd_msgs_per_s        nsqd bench_writer --batch-size=200
//	produce_vs_nsqd_ratio          ours / nsqd (target ≥ 1.0)
//	produce_jetstream_msgs_per_s   nats bench js pub async, file storage
//	produce_vs_jetstream_ratio     ours / JetStream (target ≥ 3.0)

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/producer"
)

const (
	produceDuration = 8 * time.Second
	messageSize     = 256
)

func init() {
	register("produce", runProduce)
	registerWorker("produce", produceWorker)
}

func runProduce(env *Env) error {
	ours, err := env.produceOurs(filepath.Join(env.Dir, "qmq"), produceDuration)
	if err != nil {
		return err
	}
	env.Metric("produce_msgs_per_s", ours, "msg/s")
	nsq, err := env.produceNSQ(filepath.Join(env.Dir, "nsq"))
	if err != nil {
		return err
	}
	env.Metric("produce_nsqd_msgs_per_s", nsq, "msg/s")
	env.Metric("produce_vs_nsqd_ratio", ours/nsq, "x")
	js, err := env.produceJetStream(filepath.Join(env.Dir, "nats"))
	if err != nil {
		return err
	}
	env.Metric("produce_jetstream_msgs_per_s", js, "msg/s")
	env.Metric("produce_vs_jetstream_ratio", ours/js, "x")
	return nil
}

func (e *Env) produceOurs(dir string, d time.Duration, brokerArgs ...string) (float64, error) {
	b, addr, err := e.startRealtime(dir, brokerArgs...)
	if err != nil {
		return 0, err
	}
	defer b.stop()
	var res rateResult
	if err := runWorker("produce", &res, "-addr", addr, "-duration", d.String(), "-subjects", "1"); err != nil {
		return 0, err
	}
	if res.Failed > 0 {
		return 0, fmt.Errorf("%d sends failed", res.Failed)
	}
	e.Logf("qmq: %d messages in %v", res.Messages, res.Elapsed)
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
	body := make([]byte, messageSize)
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

func (e *Env) produceNSQ(dir string) (float64, error) {
	p, tcp, _, err := e.startNSQD(dir)
	if err != nil {
		return 0, err
	}
	defer p.stop()
	bw, err := e.peerBin("bench_writer")
	if err != nil {
		return 0, err
	}
	out, err := runToolEnv(context.Background(), []string{"GOMAXPROCS=1"}, bw, "--nsqd-tcp-address="+tcp, "--size=256",
		"--batch-size=200", "--runfor="+produceDuration.String(), "--topic=sub_bench")
	if err != nil {
		return 0, err
	}
	e.Logf("nsqd: %s", lastLine(out))
	return parseRate(nsqOpsRe, out)
}

func (e *Env) produceJetStream(dir string) (float64, error) {
	p, addr, err := e.startNATS(dir)
	if err != nil {
		return 0, err
	}
	defer p.stop()
	nats, err := e.peerBin("nats")
	if err != nil {
		return 0, err
	}
	out, err := runTool(context.Background(), nats, "--no-context", "-s", "nats://"+addr, "bench", "js", "pub", "async", "js.bench",
		"--size", "256", "--msgs", "1000000", "--create", "--purge", "--storage", "file", "--no-progress")
	if err != nil {
		return 0, err
	}
	e.Logf("jetstream: %s", lastLine(out))
	return parseRate(natsMsgRe, out)
}

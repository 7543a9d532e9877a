package main

// The consume suite: one consumer process drains a backlog of 256-byte
// messages of one subject for one consumer group, acking every message.
// Ours: a backlog of 2,000,000 filled first (not measured), then the time to
// receive and ack all of them. nsqd: a backlog filled by bench_writer, then
// bench_reader (FIN per message) for a time short enough that it does not
// drain the backlog. JetStream: `nats bench js consume` over a stream of
// 2,000,000 messages.
//
//	consume_msgs_per_s             ours
//	consume_nsqd_msgs_per_s        bench_reader
//	consume_vs_nsqd_ratio          ours / nsqd (target ≥ 1.0)
//	consume_jetstream_msgs_per_s   nats bench js consume
//	consume_vs_jetstream_ratio     ours / JetStream (target ≥ 2.0)

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/consumer"
)

const consumeBacklog = 2_000_000

func init() {
	register("consume", runConsume)
	registerWorker("consume", consumeWorker)
}

func runConsume(env *Env) error {
	ours, err := env.consumeOurs(filepath.Join(env.Dir, "qmq"))
	if err != nil {
		return err
	}
	env.Metric("consume_msgs_per_s", ours, "msg/s")
	nsq, err := env.consumeNSQ(filepath.Join(env.Dir, "nsq"))
	if err != nil {
		return err
	}
	env.Metric("consume_nsqd_msgs_per_s", nsq, "msg/s")
	env.Metric("consume_vs_nsqd_ratio", ours/nsq, "x")
	js, err := env.consumeJetStream(filepath.Join(env.Dir, "nats"))
	if err != nil {
		return err
	}
	env.Metric("consume_jetstream_msgs_per_s", js, "msg/s")
	env.Metric("consume_vs_jetstream_ratio", ours/js, "x")
	return nil
}

func (e *Env) consumeOurs(dir string) (float64, error) {
	b, addr, err := e.startRealtime(dir)
	if err != nil {
		return 0, err
	}
	defer b.stop()
	var fill rateResult
	if err := runWorker("produce", &fill, "-addr", addr, "-count", fmt.Sprint(consumeBacklog), "-subject", "bench.c"); err != nil {
		return 0, err
	}
	e.Logf("qmq: backlog of %d filled in %v", fill.Messages, fill.Elapsed)
	var res rateResult
	if err := runWorker("consume", &res, "-addr", addr, "-subject", "bench.c0", "-count", fmt.Sprint(consumeBacklog)); err != nil {
		return 0, err
	}
	e.Logf("qmq: consumed %d in %v", res.Messages, res.Elapsed)
	return res.rate(), nil
}

func consumeWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	addr := fs.String("addr", "", "broker address")
	subject := fs.String("subject", "", "subject")
	count := fs.Int64("count", 0, "messages to receive")
	concurrency := fs.Int("concurrency", 1, "handler concurrency")
	work := fs.Duration("work", 0, "time each handler call takes")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after")
	sec := addClientSecurity(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	opts, err := sec.consumer()
	if err != nil {
		return nil, err
	}
	c, err := consumer.New(append(opts, consumer.WithBrokers(*addr), consumer.WithConsumerID("bench-consumer"))...)
	if err != nil {
		return nil, err
	}
	var got atomic.Int64
	done := make(chan struct{})
	start := time.Now()
	_, err = c.Subscribe(*subject, "bench", func(ctx context.Context, m *consumer.Message) error {
		if *work > 0 {
			time.Sleep(*work)
		}
		if got.Add(1) == *count {
			close(done)
		}
		return nil
	}, consumer.StartEarliest(), consumer.Concurrency(*concurrency), consumer.PullBatch(256), consumer.MaxUnacked(2048))
	if err != nil {
		return nil, err
	}
	select {
	case <-done:
	case <-time.After(*timeout):
		return nil, fmt.Errorf("received %d of %d in %v", got.Load(), *count, *timeout)
	}
	elapsed := time.Since(start)
	c.Close(context.Background())
	return rateResult{Messages: got.Load(), Elapsed: elapsed}, nil
}

func (e *Env) consumeNSQ(dir string) (float64, error) {
	p, tcp, httpAddr, err := e.startNSQD(dir)
	if err != nil {
		return 0, err
	}
	defer p.stop()
	bw, err := e.peerBin("bench_writer")
	if err != nil {
		return 0, err
	}
	br, err := e.peerBin("bench_reader")
	if err != nil {
		return 0, err
	}
	// bench_reader's channel must exist before the backlog is written.
	for _, u := range []string{"/topic/create?topic=sub_bench", "/channel/create?topic=sub_bench&channel=ch"} {
		resp, err := http.Post("http://"+httpAddr+u, "text/plain", nil)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
	}
	for depth := int64(0); depth < consumeBacklog; {
		if _, err := runToolEnv(context.Background(), []string{"GOMAXPROCS=1"}, bw, "--nsqd-tcp-address="+tcp, "--size=256",
			"--batch-size=200", "--runfor=3s", "--topic=sub_bench"); err != nil {
			return 0, err
		}
		if depth, err = nsqDepth(httpAddr); err != nil {
			return 0, err
		}
	}
	out, err := runToolEnv(context.Background(), []string{"GOMAXPROCS=1"}, br, "--nsqd-tcp-address="+tcp, "--size=256",
		"--channel=ch", "--topic=sub_bench", "--runfor=4s")
	if err != nil {
		return 0, err
	}
	e.Logf("nsqd: %s", lastLine(out))
	left, err := nsqDepth(httpAddr)
	if err != nil {
		return 0, err
	}
	if left == 0 {
		e.Logf("nsqd: bench_reader drained the backlog; its rate is a lower bound")
	}
	return parseRate(nsqOpsRe, out)
}

// nsqDepth returns the depth of channel ch of topic sub_bench.
func nsqDepth(httpAddr string) (int64, error) {
	resp, err := http.Get("http://" + httpAddr + "/stats?format=json&topic=sub_bench")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var st struct {
		Topics []struct {
			Channels []struct {
				Name  string `json:"channel_name"`
				Depth int64  `json:"depth"`
			} `json:"channels"`
		} `json:"topics"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, err
	}
	for _, t := range st.Topics {
		for _, c := range t.Channels {
			if c.Name == "ch" {
				return c.Depth, nil
			}
		}
	}
	return 0, nil
}

func (e *Env) consumeJetStream(dir string) (float64, error) {
	p, addr, err := e.startNATS(dir)
	if err != nil {
		return 0, err
	}
	defer p.stop()
	nats, err := e.peerBin("nats")
	if err != nil {
		return 0, err
	}
	n := fmt.Sprint(consumeBacklog)
	if _, err := runTool(context.Background(), nats, "--no-context", "-s", "nats://"+addr, "bench", "js", "pub", "async", "js.bench",
		"--size", "256", "--msgs", n, "--create", "--purge", "--storage", "file", "--no-progress"); err != nil {
		return 0, err
	}
	out, err := runTool(context.Background(), nats, "--no-context", "-s", "nats://"+addr, "bench", "js", "consume", "--msgs", n, "--no-progress")
	if err != nil {
		return 0, err
	}
	e.Logf("jetstream: %s", lastLine(out))
	return parseRate(natsMsgRe, out)
}

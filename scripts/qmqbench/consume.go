package main

// The consume suite: one consumer process (one core, GOMAXPROCS=1) drains
// a backlog of 256-byte messages of one subject, filled first and not
// measured, acking every message.
//
// Ours: a backlog of 2,000,000; consumer pulls of 256, up to 2,048
// messages un-acked, PullDepth 2, one handler goroutine; the time runs from
// Subscribe until Close returned (every ack answered). Three times, as
// three consumer groups of the same backlog:
//   - range acks (the consumer's default): one ack request for the longest
//     finished prefix (up to 1,024 messages), one in flight: all 2,000,000;
//   - per-message acks (consumer.AckEach): each message acked on its own
//     once its handler returned, naming that message only, in
//     pull-sequence order, up to 1,024 in flight (pipelined, not waited for
//     one by one; a message counts as un-acked until its ack is answered).
//     Acks ready at the same time share a request that lists each pull seq
//     (up to 256, never a range; the broker applies them in order, a
//     consecutive run as one store ack), as bench_reader's FINs share a
//     write: all 2,000,000;
//   - the same with every ack in a request of its own
//     (consumer.AckEachSingly, what a broker that predates list acks gets):
//     the first consumeSinglyCount messages.
//
// nsqd (in memory: --mem-queue-size=20,000,000, its /stats must show no
// message in its disk queue): a backlog of ≥ 2,000,000 filled by
// bench_writer, then bench_reader, its own tool: RDY 2,500, one FIN per
// message (FIN has no reply: acks are not waited for), for a time short
// enough that it does not drain the backlog.
//
// JetStream (file storage, sync_interval at its default: fsync every
// 2 minutes): `nats bench js consume` over a stream of 2,000,000: a durable
// consumer with explicit acks, one ack per message (not waited for), max
// ack pending 500.
//
//	consume_rangeack_msgs_per_s             ours, range acks
//	consume_permsg_ack_msgs_per_s           ours, per-message acks
//	consume_nsqd_msgs_per_s                 bench_reader
//	consume_permsg_ack_vs_nsqd_ratio        per-message acks / nsqd (target ≥ 1.5)
//	consume_permsg_ack_single_msgs_per_s    ours, per-message acks, a request each
//	consume_permsg_ack_single_vs_nsqd_ratio the same / nsqd
//	consume_rangeack_vs_nsqd_ratio          range acks / nsqd
//	consume_jetstream_msgs_per_s            nats bench js consume
//	consume_permsg_ack_vs_jetstream_ratio   per-message acks / JetStream
//	consume_rangeack_vs_jetstream_ratio     range acks / JetStream

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/consumer"
)

const (
	consumeBacklog = 2_000_000
	// consumeSinglyCount is what the group acking a request per message
	// consumes: slower, so not the whole backlog.
	consumeSinglyCount = 300_000
)

func init() {
	register("consume", runConsume)
	registerWorker("consume", consumeWorker)
}

func runConsume(env *Env) error {
	ranged, each, singly, err := env.consumeOurs(filepath.Join(env.Dir, "qmq"))
	if err != nil {
		return err
	}
	env.Metric("consume_rangeack_msgs_per_s", ranged, "msg/s")
	env.Metric("consume_permsg_ack_msgs_per_s", each, "msg/s")
	env.Metric("consume_permsg_ack_single_msgs_per_s", singly, "msg/s")
	nsq, err := env.consumeNSQ(filepath.Join(env.Dir, "nsq"))
	if err != nil {
		return err
	}
	env.Metric("consume_nsqd_msgs_per_s", nsq, "msg/s")
	env.Metric("consume_permsg_ack_vs_nsqd_ratio", each/nsq, "x")
	env.Metric("consume_rangeack_vs_nsqd_ratio", ranged/nsq, "x")
	env.Metric("consume_permsg_ack_single_vs_nsqd_ratio", singly/nsq, "x")
	js, err := env.consumeJetStream(filepath.Join(env.Dir, "nats"))
	if err != nil {
		return err
	}
	env.Metric("consume_jetstream_msgs_per_s", js, "msg/s")
	env.Metric("consume_permsg_ack_vs_jetstream_ratio", each/js, "x")
	env.Metric("consume_rangeack_vs_jetstream_ratio", ranged/js, "x")
	return nil
}

// consumeOurs fills the backlog and consumes it with range acks (group
// bench), with per-message acks (group bench-each), and its first
// consumeSinglyCount with per-message acks a request each (group
// bench-single).
func (e *Env) consumeOurs(dir string) (ranged, each, singly float64, err error) {
	b, addr, err := e.startRealtime(dir)
	if err != nil {
		return 0, 0, 0, err
	}
	defer b.stop()
	var fill rateResult
	if err := runWorker("produce", &fill, "-addr", addr, "-count", fmt.Sprint(consumeBacklog), "-subject", "bench.c"); err != nil {
		return 0, 0, 0, err
	}
	e.Logf("qmq: backlog of %d filled in %v", fill.Messages, fill.Elapsed)
	rates := make([]float64, 3)
	for i, run := range []struct {
		what  string
		count int
		args  []string
	}{
		{"range acks", consumeBacklog, []string{"-group", "bench"}},
		{"per-message acks", consumeBacklog, []string{"-group", "bench-each", "-ack-each"}},
		{"per-message acks, a request each", consumeSinglyCount, []string{"-group", "bench-single", "-ack-singly"}},
	} {
		var res rateResult
		args := append([]string{"-addr", addr, "-subject", "bench.c0", "-count", fmt.Sprint(run.count)}, run.args...)
		if err := runWorker("consume", &res, args...); err != nil {
			return 0, 0, 0, err
		}
		e.Logf("qmq %s: consumed %d in %v", run.what, res.Messages, res.Elapsed)
		rates[i] = res.rate()
	}
	return rates[0], rates[1], rates[2], nil
}

func consumeWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	addr := fs.String("addr", "", "broker address")
	subject := fs.String("subject", "", "subject")
	group := fs.String("group", "bench", "consumer group")
	count := fs.Int64("count", 0, "messages to receive")
	concurrency := fs.Int("concurrency", 1, "handler concurrency")
	work := fs.Duration("work", 0, "time each handler call takes")
	ackEach := fs.Bool("ack-each", false, "ack each message on its own (consumer.AckEach)")
	ackSingly := fs.Bool("ack-singly", false, "ack each message with a request of its own (consumer.AckEachSingly)")
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
	subOpts := []consumer.SubscribeOption{consumer.StartEarliest(), consumer.Concurrency(*concurrency),
		consumer.PullBatch(256), consumer.MaxUnacked(2048)}
	switch {
	case *ackSingly:
		subOpts = append(subOpts, consumer.AckEachSingly())
	case *ackEach:
		subOpts = append(subOpts, consumer.AckEach())
	}
	start := time.Now()
	_, err = c.Subscribe(*subject, *group, func(ctx context.Context, m *consumer.Message) error {
		if *work > 0 {
			time.Sleep(*work)
		}
		if got.Add(1) == *count {
			close(done)
		}
		return nil
	}, subOpts...)
	if err != nil {
		return nil, err
	}
	select {
	case <-done:
	case <-time.After(*timeout):
		return nil, fmt.Errorf("received %d of %d in %v", got.Load(), *count, *timeout)
	}
	// Close sends the last acks and waits for their answers: the time
	// includes every ack.
	if err := c.Close(context.Background()); err != nil {
		return nil, err
	}
	return rateResult{Messages: got.Load(), Elapsed: time.Since(start)}, nil
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
	for _, u := range []string{"/topic/create?topic=" + nsqTopic, "/channel/create?topic=" + nsqTopic + "&channel=ch"} {
		resp, err := http.Post("http://"+httpAddr+u, "text/plain", nil)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
	}
	for depth := int64(0); depth < consumeBacklog; {
		if _, err := runToolEnv(context.Background(), []string{"GOMAXPROCS=1"}, bw, "--nsqd-tcp-address="+tcp, "--size=256",
			"--batch-size=200", "--runfor=3s", "--topic="+nsqTopic); err != nil {
			return 0, err
		}
		if depth, err = nsqDepth(httpAddr); err != nil {
			return 0, err
		}
	}
	if _, err := nsqMemoryOnly(httpAddr); err != nil {
		return 0, err
	}
	out, err := runToolEnv(context.Background(), []string{"GOMAXPROCS=1"}, br, "--nsqd-tcp-address="+tcp, "--size=256",
		"--channel=ch", "--topic="+nsqTopic, "--runfor=4s")
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
	if _, err := nsqMemoryOnly(httpAddr); err != nil {
		return 0, err
	}
	return parseRate(nsqOpsRe, out)
}

// nsqDepth returns the depth of channel ch of topic nsqTopic.
func nsqDepth(httpAddr string) (int64, error) {
	st, err := readNSQStats(httpAddr)
	if err != nil {
		return 0, err
	}
	for _, t := range st.Topics {
		if t.Name != nsqTopic {
			continue
		}
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

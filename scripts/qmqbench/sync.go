package main

// The sync suite: one message in flight at a time, each send waiting for
// its ack, 256-byte messages, one connection, clients on one core
// (GOMAXPROCS=1). None of the three fsyncs before its ack:
//   - ours: qmq-realtime with --flush=async (acked once in the page cache;
//     flushed in the background), producer.Send in a loop;
//   - nsqd in memory (--mem-queue-size=20,000,000): bench_writer
//     --batch-size=1 (one PUB, wait for its OK);
//   - JetStream (file storage, sync_interval at its default: fsync every
//     2 minutes): `nats bench js pub sync` (one publish, wait for its ack),
//     syncJetStreamMsgs messages a round (it is count-based).
//
//	sync_send_msgs_per_s        ours
//	sync_nsqd_msgs_per_s        nsqd
//	sync_vs_nsqd_ratio          ours / nsqd (target ≥ 1.0)
//	sync_jetstream_msgs_per_s   JetStream
//	sync_vs_jetstream_ratio     ours / JetStream
//
// All servers run for the whole suite and the clients take turns,
// syncRounds rounds of syncRound each, so that all see the same load on
// the shared machine (a round trip here is tens of microseconds, and the
// other work on the machine moves the rates of a single 5 s run by ±30%).
// The rates are the totals over the rounds; each round's ratios are logged.

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"github.com/qmq-go/qmq/producer"
)

const (
	syncRounds   = 3
	syncRound    = 2 * time.Second
	syncDuration = syncRound // the worker's default
	// syncJetStreamMsgs is a JetStream round: ~1–2 s at the 3–7 k msg/s a
	// synchronous JetStream publish takes here.
	syncJetStreamMsgs = 5000
)

func init() {
	register("sync", runSync)
	registerWorker("sync", syncWorker)
}

func runSync(env *Env) error {
	b, addr, err := env.startRealtime(filepath.Join(env.Dir, "qmq"), "--flush", "async")
	if err != nil {
		return err
	}
	defer b.stop()
	p, tcp, nsqHTTP, err := env.startNSQD(filepath.Join(env.Dir, "nsq"))
	if err != nil {
		return err
	}
	defer p.stop()
	bw, err := env.peerBin("bench_writer")
	if err != nil {
		return err
	}
	n, natsAddr, err := env.startNATS(filepath.Join(env.Dir, "nats"))
	if err != nil {
		return err
	}
	defer n.stop()
	nats, err := env.peerBin("nats")
	if err != nil {
		return err
	}
	var oursMsgs, nsqMsgs, jsMsgs float64
	var oursTime, nsqTime, jsTime time.Duration
	for round := range syncRounds {
		var res rateResult
		if err := runWorker("sync", &res, "-addr", addr, "-duration", syncRound.String()); err != nil {
			return err
		}
		out, err := runToolEnv(context.Background(), []string{"GOMAXPROCS=1"}, bw, "--nsqd-tcp-address="+tcp, "--size=256",
			"--batch-size=1", "--runfor="+syncRound.String(), "--topic="+nsqTopic)
		if err != nil {
			return err
		}
		nsq, err := parseRate(nsqOpsRe, out)
		if err != nil {
			return err
		}
		jsOut, err := runToolEnv(context.Background(), []string{"GOMAXPROCS=1"}, nats, "--no-context", "-s", "nats://"+natsAddr,
			"bench", "js", "pub", "sync", "js.sync", "--size", "256", "--msgs", fmt.Sprint(syncJetStreamMsgs),
			"--create", "--purge", "--storage", "file", "--no-progress")
		if err != nil {
			return err
		}
		js, err := parseRate(natsMsgRe, jsOut)
		if err != nil {
			return err
		}
		oursMsgs += float64(res.Messages)
		oursTime += res.Elapsed
		nsqMsgs += nsq * syncRound.Seconds()
		nsqTime += syncRound
		jsMsgs += syncJetStreamMsgs
		jsTime += time.Duration(float64(syncJetStreamMsgs) / js * float64(time.Second))
		env.Logf("round %d: ours %.0f msg/s, nsqd %.0f msg/s (%.2f), JetStream %.0f msg/s (%.2f); nsqd: %s; JetStream: %s",
			round, res.rate(), nsq, res.rate()/nsq, js, res.rate()/js, lastLine(out), lastLine(jsOut))
	}
	if _, err := nsqMemoryOnly(nsqHTTP); err != nil {
		return err
	}
	ours := oursMsgs / oursTime.Seconds()
	nsq := nsqMsgs / nsqTime.Seconds()
	js := jsMsgs / jsTime.Seconds()
	env.Metric("sync_send_msgs_per_s", ours, "msg/s")
	env.Metric("sync_nsqd_msgs_per_s", nsq, "msg/s")
	env.Metric("sync_vs_nsqd_ratio", ours/nsq, "x")
	env.Metric("sync_jetstream_msgs_per_s", js, "msg/s")
	env.Metric("sync_vs_jetstream_ratio", ours/js, "x")
	return nil
}

func syncWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("sync", flag.ContinueOnError)
	addr := fs.String("addr", "", "broker address")
	d := fs.Duration("duration", syncDuration, "how long to send")
	spin := fs.Duration("spin", 0, "the producer's WithSendSpin (0: its default; experiments)")
	sec := addClientSecurity(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	opts, err := sec.producer()
	if err != nil {
		return nil, err
	}
	opts = append(opts, producer.WithBrokers(*addr))
	if *spin != 0 {
		opts = append(opts, producer.WithSendSpin(*spin))
	}
	p, err := producer.New(opts...)
	if err != nil {
		return nil, err
	}
	defer p.Close(context.Background())
	body := make([]byte, messageSize)
	ctx := context.Background()
	start := time.Now()
	deadline := start.Add(*d)
	var n int64
	for time.Now().Before(deadline) {
		if err := p.Send(ctx, &producer.Message{Subject: "bench.sync", Body: body}); err != nil {
			return nil, err
		}
		n++
	}
	return rateResult{Messages: n, Elapsed: time.Since(start)}, nil
}

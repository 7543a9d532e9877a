package main

// The sync suite: one message in flight at a time (Send waits for each ack)
// to our broker with --flush=async, against nsqd PUB one at a time
// (bench_writer --batch-size=1).
//
//	sync_send_msgs_per_s        ours
//	sync_nsqd_msgs_per_s        nsqd
//	sync_vs_nsqd_ratio          ours / nsqd (target ≥ 1.0)
//
// Both servers run for the whole suite and the two clients take turns,
// syncRounds rounds of syncRound each, so that both see the same load on
// the shared machine (a round trip here is tens of microseconds, and the
// other work on the machine moves the rates of a single 5 s run by ±30%).
// The rates are the totals over the rounds; each round's ratio is logged.

import (
	"context"
	"flag"
	"path/filepath"
	"time"

	"github.com/qmq-go/qmq/producer"
)

const (
	syncRounds   = 3
	syncRound    = 2 * time.Second
	syncDuration = syncRound // the worker's default
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
	p, tcp, _, err := env.startNSQD(filepath.Join(env.Dir, "nsq"))
	if err != nil {
		return err
	}
	defer p.stop()
	bw, err := env.peerBin("bench_writer")
	if err != nil {
		return err
	}
	var oursMsgs, nsqMsgs float64
	var oursTime, nsqTime time.Duration
	for round := range syncRounds {
		var res rateResult
		if err := runWorker("sync", &res, "-addr", addr, "-duration", syncRound.String()); err != nil {
			return err
		}
		out, err := runToolEnv(context.Background(), []string{"GOMAXPROCS=1"}, bw, "--nsqd-tcp-address="+tcp, "--size=256",
			"--batch-size=1", "--runfor="+syncRound.String(), "--topic=sub_bench")
		if err != nil {
			return err
		}
		nsq, err := parseRate(nsqOpsRe, out)
		if err != nil {
			return err
		}
		oursMsgs += float64(res.Messages)
		oursTime += res.Elapsed
		nsqMsgs += nsq * syncRound.Seconds()
		nsqTime += syncRound
		env.Logf("round %d: ours %.0f msg/s, nsqd %.0f msg/s (%.2f); nsqd: %s", round, res.rate(), nsq, res.rate()/nsq, lastLine(out))
	}
	ours := oursMsgs / oursTime.Seconds()
	nsq := nsqMsgs / nsqTime.Seconds()
	env.Metric("sync_send_msgs_per_s", ours, "msg/s")
	env.Metric("sync_nsqd_msgs_per_s", nsq, "msg/s")
	env.Metric("sync_vs_nsqd_ratio", ours/nsq, "x")
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

package main

// The sync suite: one message in flight at a time (Send waits for each ack)
// to our broker with --flush=async, against nsqd PUB one at a time
// (bench_writer --batch-size=1).
//
//	sync_send_msgs_per_s        ours
//	sync_nsqd_msgs_per_s        nsqd
//	sync_vs_nsqd_ratio          ours / nsqd (target ≥ 1.0)

import (
	"context"
	"flag"
	"path/filepath"
	"time"

	"github.com/qmq-go/qmq/producer"
)

const syncDuration = 5 * time.Second

func init() {
	register("sync", runSync)
	registerWorker("sync", syncWorker)
}

func runSync(env *Env) error {
	b, addr, err := env.startRealtime(filepath.Join(env.Dir, "qmq"), "--flush", "async")
	if err != nil {
		return err
	}
	var res rateResult
	err = runWorker("sync", &res, "-addr", addr, "-duration", syncDuration.String())
	b.stop()
	if err != nil {
		return err
	}
	ours := res.rate()
	env.Metric("sync_send_msgs_per_s", ours, "msg/s")

	p, tcp, _, err := env.startNSQD(filepath.Join(env.Dir, "nsq"))
	if err != nil {
		return err
	}
	defer p.stop()
	bw, err := env.peerBin("bench_writer")
	if err != nil {
		return err
	}
	out, err := runToolEnv(context.Background(), []string{"GOMAXPROCS=1"}, bw, "--nsqd-tcp-address="+tcp, "--size=256",
		"--batch-size=1", "--runfor="+syncDuration.String(), "--topic=sub_bench")
	if err != nil {
		return err
	}
	env.Logf("nsqd: %s", lastLine(out))
	nsq, err := parseRate(nsqOpsRe, out)
	if err != nil {
		return err
	}
	env.Metric("sync_nsqd_msgs_per_s", nsq, "msg/s")
	env.Metric("sync_vs_nsqd_ratio", ours/nsq, "x")
	return nil
}

func syncWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("sync", flag.ContinueOnError)
	addr := fs.String("addr", "", "broker address")
	d := fs.Duration("duration", syncDuration, "how long to send")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	p, err := producer.New(producer.WithBrokers(*addr))
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

package main

// The fairness suite: a group of 2 consumers drains a backlog alone, then
// again while a group of 64 consumers floods the broker with pulls of the
// same subject (each group in its own process). The broker's pull actors
// take turns per group with a time slice, so the small group keeps most of
// its throughput.
//
//	fairness_small_alone_msgs_per_s, fairness_small_flooded_msgs_per_s
//	fairness_small_group_ratio      flooded / alone (target ≥ 0.5)

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/consumer"
)

func init() {
	register("fairness", runFairness)
	registerWorker("group", groupWorker)
}

func runFairness(env *Env) error {
	b, addr, err := env.startRealtime(filepath.Join(env.Dir, "qmq"))
	if err != nil {
		return err
	}
	defer b.stop()
	var fill rateResult
	if err := runWorker("produce", &fill, "-addr", addr, "-count", "3000000", "-subject", "bench.fair"); err != nil {
		return err
	}
	var alone rateResult
	if err := runWorker("group", &alone, "-addr", addr, "-group", "small-alone", "-consumers", "2", "-duration", "4s"); err != nil {
		return err
	}
	floodDone := make(chan error, 1)
	go func() {
		var flood rateResult
		floodDone <- runWorker("group", &flood, "-addr", addr, "-group", "big", "-consumers", "64", "-duration", "7s")
	}()
	time.Sleep(1500 * time.Millisecond) // the flood is under way
	var flooded rateResult
	err = runWorker("group", &flooded, "-addr", addr, "-group", "small-flooded", "-consumers", "2", "-duration", "4s")
	if ferr := <-floodDone; err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	env.Metric("fairness_small_alone_msgs_per_s", alone.rate(), "msg/s")
	env.Metric("fairness_small_flooded_msgs_per_s", flooded.rate(), "msg/s")
	env.Metric("fairness_small_group_ratio", flooded.rate()/alone.rate(), "x")
	return nil
}

// groupWorker runs n consumers of one group with a no-op handler and counts
// what they handle after a warm-up second.
func groupWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("group", flag.ContinueOnError)
	addr := fs.String("addr", "", "broker address")
	n := fs.Int("consumers", 1, "consumers")
	group := fs.String("group", "g", "consumer group")
	d := fs.Duration("duration", 4*time.Second, "measuring time")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var counting atomic.Bool
	var handled atomic.Int64
	var cs []*consumer.Consumer
	for i := range *n {
		c, err := consumer.New(consumer.WithBrokers(*addr), consumer.WithConsumerID(fmt.Sprintf("%s-c%d", *group, i)))
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
		if _, err := c.Subscribe("bench.fair0", *group, func(ctx context.Context, m *consumer.Message) error {
			if counting.Load() {
				handled.Add(1)
			}
			return nil
		}, consumer.StartEarliest(), consumer.PullBatch(64), consumer.MaxUnacked(256)); err != nil {
			return nil, err
		}
	}
	time.Sleep(time.Second)
	counting.Store(true)
	start := time.Now()
	time.Sleep(*d)
	counting.Store(false)
	elapsed := time.Since(start)
	for _, c := range cs {
		c.Close(context.Background())
	}
	return rateResult{Messages: handled.Load(), Elapsed: elapsed}, nil
}

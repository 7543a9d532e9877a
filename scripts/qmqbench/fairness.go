package main

// The fairness suite: a group of 2 consumers drains a backlog alone, then
// again while a group of 64 consumers floods the broker with pulls of the
// same subject (each group in its own process). The broker's pull actors
// take turns per group with a time slice, and a group that takes more than
// its share of deliveries while another drains a backlog has its pulls held
// (realtime, "Fair share"), so the small group keeps most of its
// throughput. Rounds alternate alone and flooded on one broker (fresh groups
// each round, all reading the same backlog from its start) so both see the
// same machine; the figures are the means over the rounds.
//
//	fairness_small_alone_msgs_per_s, fairness_small_flooded_msgs_per_s
//	fairness_small_group_ratio      flooded / alone (target ≥ 0.5)
//
// QMQ_BENCH_FAIRNESS_BROKER_FLAGS adds flags to the broker's command line
// (space-separated, for experiments such as --fair-share-hold=0).

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/consumer"
)

const fairnessRounds = 3

func init() {
	register("fairness", runFairness)
	registerWorker("group", groupWorker)
}

func runFairness(env *Env) error {
	b, addr, err := env.startRealtime(filepath.Join(env.Dir, "qmq"), strings.Fields(os.Getenv("QMQ_BENCH_FAIRNESS_BROKER_FLAGS"))...)
	if err != nil {
		return err
	}
	defer b.stop()
	var fill rateResult
	if err := runWorker("produce", &fill, "-addr", addr, "-count", "3000000", "-subject", "bench.fair"); err != nil {
		return err
	}
	var alone, flooded float64
	for round := 0; round < fairnessRounds; round++ {
		a, f, big, err := fairnessRound(addr, round)
		if err != nil {
			return err
		}
		env.Logf("round %d: small group alone %.0f msg/s, flooded %.0f msg/s (%.2f); the flood %.0f msg/s", round, a, f, f/a, big)
		alone += a / fairnessRounds
		flooded += f / fairnessRounds
	}
	env.Metric("fairness_small_alone_msgs_per_s", alone, "msg/s")
	env.Metric("fairness_small_flooded_msgs_per_s", flooded, "msg/s")
	env.Metric("fairness_small_group_ratio", flooded/alone, "x")
	return nil
}

// fairnessRound measures the small group alone, then beside the flood; it
// returns both rates and the flood's.
func fairnessRound(addr string, round int) (alone, flooded, big float64, err error) {
	var a rateResult
	if err := runWorker("group", &a, "-addr", addr, "-group", fmt.Sprint("small-alone", round), "-consumers", "2", "-duration", "4s"); err != nil {
		return 0, 0, 0, err
	}
	floodDone := make(chan error, 1)
	var flood rateResult
	go func() {
		floodDone <- runWorker("group", &flood, "-addr", addr, "-group", fmt.Sprint("big", round), "-consumers", "64", "-duration", "7s")
	}()
	time.Sleep(1500 * time.Millisecond) // the flood is under way
	var f rateResult
	err = runWorker("group", &f, "-addr", addr, "-group", fmt.Sprint("small-flooded", round), "-consumers", "2", "-duration", "4s")
	if ferr := <-floodDone; err == nil {
		err = ferr
	}
	if err != nil {
		return 0, 0, 0, err
	}
	return a.rate(), f.rate(), flood.rate(), nil
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

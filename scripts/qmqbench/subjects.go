package main

// The subjects suite: produce throughput with messages spread over 10,000
// subjects against the same producer on one subject, each against a fresh
// broker with the default durable flush.
//
//	subjects_1_msgs_per_s, subjects_10k_msgs_per_s
//	subjects_10k_vs_1_ratio        (target ≥ 0.8)
//
// Both brokers run for the whole suite and the two workers (the produce
// suite's, -subjects 1 and 10000) take turns, subjectsRounds rounds of
// subjectsRound each (6 s per side in all), so that both see the same load
// on the shared machine: the other work on it moves the rate of a single
// run by ±15%, and a 6 s run of one side followed by one of the other put
// that drift straight into the ratio. Within a round the order alternates
// (1 then 10k, 10k then 1, …), so each side starts as often right after
// its own turn as after the other's (whose broker may still be finishing
// its last fdatasync). The rates are the totals over the rounds; each
// round's rates and ratio are logged.

import (
	"fmt"
	"path/filepath"
	"time"
)

const (
	subjectsRounds = 4
	subjectsRound  = 1500 * time.Millisecond
)

func init() { register("subjects", runSubjects) }

func runSubjects(env *Env) error {
	sides := []string{"1", "10000"}
	var addrs [2]string
	for i, n := range sides {
		b, addr, err := env.startRealtime(filepath.Join(env.Dir, "qmq"+n))
		if err != nil {
			return err
		}
		defer b.stop()
		addrs[i] = addr
	}
	var msgs [2]int64
	var elapsed [2]time.Duration
	for round := range subjectsRounds {
		order := []int{0, 1}
		if round%2 == 1 {
			order = []int{1, 0}
		}
		var rates [2]float64
		for _, i := range order {
			var res rateResult
			if err := runWorker("produce", &res, "-addr", addrs[i], "-duration", subjectsRound.String(), "-subjects", sides[i]); err != nil {
				return err
			}
			if res.Failed > 0 {
				return fmt.Errorf("%s subjects: %d sends failed", sides[i], res.Failed)
			}
			msgs[i] += res.Messages
			elapsed[i] += res.Elapsed
			rates[i] = res.rate()
		}
		env.Logf("round %d: 1 subject %.0f msg/s, 10k subjects %.0f msg/s (%.3f)", round, rates[0], rates[1], rates[1]/rates[0])
	}
	one := float64(msgs[0]) / elapsed[0].Seconds()
	many := float64(msgs[1]) / elapsed[1].Seconds()
	env.Metric("subjects_1_msgs_per_s", one, "msg/s")
	env.Metric("subjects_10k_msgs_per_s", many, "msg/s")
	env.Metric("subjects_10k_vs_1_ratio", many/one, "x")
	return nil
}

package main

// The subjects suite: produce throughput with messages spread over 10,000
// subjects against the same producer on one subject, each against a fresh
// broker with the default durable flush.
//
//	subjects_1_msgs_per_s, subjects_10k_msgs_per_s
//	subjects_10k_vs_1_ratio        (target ≥ 0.8)

import (
	"path/filepath"
	"time"
)

func init() { register("subjects", runSubjects) }

func runSubjects(env *Env) error {
	var rates [2]float64
	for i, n := range []string{"1", "10000"} {
		b, addr, err := env.startRealtime(filepath.Join(env.Dir, "qmq"+n))
		if err != nil {
			return err
		}
		var res rateResult
		err = runWorker("produce", &res, "-addr", addr, "-duration", (6 * time.Second).String(), "-subjects", n)
		b.stop()
		if err != nil {
			return err
		}
		rates[i] = res.rate()
	}
	env.Metric("subjects_1_msgs_per_s", rates[0], "msg/s")
	env.Metric("subjects_10k_msgs_per_s", rates[1], "msg/s")
	env.Metric("subjects_10k_vs_1_ratio", rates[1]/rates[0], "x")
	return nil
}

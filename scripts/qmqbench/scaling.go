package main

// The scaling suite.
//
// scaling_8_vs_1_ratio: consume throughput of 8 consumers of one group
// against 1, every handler call taking 1 ms (one message at a time per
// consumer), over a backlog large enough that neither drains it
// (target ≥ 7.0). Each consumer runs in a process of its own, as consumers
// of a group do; all count the messages they handle in the same window.
//
// join_pause_max_ms: a producer sends a steady 5,000 msg/s; two consumers
// stay while every second a new consumer joins the group and the oldest
// temporary one leaves (Close); the figure is the longest gap between two
// consecutive deliveries to the group, over 10 s (target ≤ 100 ms).

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/producer"
)

func init() {
	register("scaling", runScaling)
	registerWorker("scale-consume", scaleConsumeWorker)
	registerWorker("join-pause", joinPauseWorker)
}

func runScaling(env *Env) error {
	b, addr, err := env.startRealtime(filepath.Join(env.Dir, "qmq"))
	if err != nil {
		return err
	}
	defer b.stop()
	var fill rateResult
	if err := runWorker("produce", &fill, "-addr", addr, "-count", "60000", "-subject", "bench.scale"); err != nil {
		return err
	}
	var rates [2]float64
	for i, n := range []int{1, 8} {
		// Every process starts counting at the same moment, after a warm-up.
		start := time.Now().Add(2 * time.Second)
		results := make([]rateResult, n)
		errs := make(chan error, n)
		for j := range n {
			go func() {
				errs <- runWorker("scale-consume", &results[j], "-addr", addr, "-consumers", "1", "-group", fmt.Sprintf("g%d", n),
					"-id", fmt.Sprintf("g%d-c%d", n, j), "-start", fmt.Sprint(start.UnixNano()), "-duration", "4s")
			}()
		}
		var total int64
		for range n {
			if err := <-errs; err != nil {
				return err
			}
		}
		for _, r := range results {
			total += r.Messages
		}
		rates[i] = float64(total) / 4
		env.Logf("qmq: %d consumers: %d messages in 4s", n, total)
	}
	env.Metric("scaling_1_msgs_per_s", rates[0], "msg/s")
	env.Metric("scaling_8_msgs_per_s", rates[1], "msg/s")
	env.Metric("scaling_8_vs_1_ratio", rates[1]/rates[0], "x")

	var pause struct{ MaxGap, P999Gap time.Duration }
	if err := runWorker("join-pause", &pause, "-addr", addr, "-duration", "10s"); err != nil {
		return err
	}
	env.Logf("qmq: 99.9th percentile gap %v", pause.P999Gap)
	env.Metric("join_pause_max_ms", float64(pause.MaxGap)/float64(time.Millisecond), "ms")
	return nil
}

// scaleConsumeWorker runs n consumers of one group with a 1 ms handler and
// counts what they handle after a warm-up second.
func scaleConsumeWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("scale-consume", flag.ContinueOnError)
	addr := fs.String("addr", "", "broker address")
	n := fs.Int("consumers", 1, "consumers")
	group := fs.String("group", "g", "consumer group")
	id := fs.String("id", "", "consumer id prefix (default: the group)")
	startAt := fs.Int64("start", 0, "Unix nanoseconds to start counting at (0: after a second)")
	d := fs.Duration("duration", 4*time.Second, "measuring time")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *id == "" {
		*id = *group
	}
	var counting atomic.Bool
	var handled atomic.Int64
	var cs []*consumer.Consumer
	for i := range *n {
		c, err := consumer.New(consumer.WithBrokers(*addr), consumer.WithConsumerID(fmt.Sprintf("%s-%d", *id, i)))
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
		if _, err := c.Subscribe("bench.scale0", *group, func(ctx context.Context, m *consumer.Message) error {
			time.Sleep(time.Millisecond)
			if counting.Load() {
				handled.Add(1)
			}
			return nil
		}, consumer.StartEarliest(), consumer.PullBatch(32), consumer.MaxUnacked(64)); err != nil {
			return nil, err
		}
	}
	if *startAt > 0 {
		time.Sleep(time.Until(time.Unix(0, *startAt)))
	} else {
		time.Sleep(time.Second)
	}
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

// joinPauseWorker measures the longest gap in a group's deliveries while
// consumers join and leave.
func joinPauseWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("join-pause", flag.ContinueOnError)
	addr := fs.String("addr", "", "broker address")
	d := fs.Duration("duration", 10*time.Second, "measuring time")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var times []time.Time
	measuring := false
	handler := func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		if measuring {
			times = append(times, time.Now())
		}
		mu.Unlock()
		return nil
	}
	newConsumer := func(id string) (*consumer.Consumer, error) {
		c, err := consumer.New(consumer.WithBrokers(*addr), consumer.WithConsumerID(id))
		if err != nil {
			return nil, err
		}
		_, err = c.Subscribe("bench.join", "join", handler, consumer.PullTimeout(time.Second))
		return c, err
	}
	var stay []*consumer.Consumer
	for i := range 2 {
		c, err := newConsumer(fmt.Sprintf("stay-%d", i))
		if err != nil {
			return nil, err
		}
		stay = append(stay, c)
	}
	p, err := producer.New(producer.WithBrokers(*addr))
	if err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // a steady 5,000 msg/s
		defer wg.Done()
		body := make([]byte, messageSize)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				for range 5 {
					p.SendAsync(&producer.Message{Subject: "bench.join", Body: body}, nil)
				}
			}
		}
	}()
	time.Sleep(time.Second)
	mu.Lock()
	measuring = true
	mu.Unlock()
	var temps []*consumer.Consumer
	end := time.Now().Add(*d)
	for i := 0; time.Now().Before(end); i++ {
		c, err := newConsumer(fmt.Sprintf("temp-%d", i))
		if err != nil {
			return nil, err
		}
		temps = append(temps, c)
		if len(temps) > 2 {
			old := temps[0]
			temps = temps[1:]
			old.Close(context.Background())
		}
		time.Sleep(time.Second)
	}
	mu.Lock()
	measuring = false
	ts := times
	mu.Unlock()
	close(stop)
	wg.Wait()
	p.Close(context.Background())
	for _, c := range append(stay, temps...) {
		c.Close(context.Background())
	}
	if len(ts) < 2 {
		return nil, fmt.Errorf("only %d deliveries", len(ts))
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	gaps := make([]time.Duration, 0, len(ts)-1)
	for i := 1; i < len(ts); i++ {
		gaps = append(gaps, ts[i].Sub(ts[i-1]))
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
	return struct{ MaxGap, P999Gap time.Duration }{gaps[len(gaps)-1], gaps[len(gaps)*999/1000]}, nil
}

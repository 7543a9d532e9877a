package main

// The latency suite: a producer sends 256-byte messages at a steady
// 20,000 msg/s to our broker (default durable flush) and a consumer of the
// same process receives them; each message carries its send time, and the
// handler records receive − send. The worker process may use every core
// (there is no peer to match), and paces sends against an absolute
// schedule, 20 messages every millisecond.
//
//	e2e_p50_ms, e2e_p99_ms     send to handler (target p99 ≤ 5 ms)

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/producer"
)

func init() {
	register("latency", runLatency)
	registerWorker("latency", latencyWorker)
}

type latencyResult struct {
	P50, P99, Max time.Duration
	Count         int
}

func runLatency(env *Env) error {
	b, addr, err := env.startRealtime(filepath.Join(env.Dir, "qmq"))
	if err != nil {
		return err
	}
	defer b.stop()
	var res latencyResult
	if err := runWorkerProcs("latency", 0, &res, "-addr", addr, "-rate", "20000", "-duration", "10s"); err != nil {
		return err
	}
	env.Logf("qmq: %d messages, max %v", res.Count, res.Max)
	env.Metric("e2e_p50_ms", float64(res.P50)/float64(time.Millisecond), "ms")
	env.Metric("e2e_p99_ms", float64(res.P99)/float64(time.Millisecond), "ms")
	return nil
}

func latencyWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("latency", flag.ContinueOnError)
	addr := fs.String("addr", "", "broker address")
	rate := fs.Int("rate", 20000, "messages per second")
	d := fs.Duration("duration", 10*time.Second, "how long to send")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	p, err := producer.New(producer.WithBrokers(*addr))
	if err != nil {
		return nil, err
	}
	c, err := consumer.New(consumer.WithBrokers(*addr), consumer.WithConsumerID("latency"))
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var lat []time.Duration
	warm := time.Now().Add(time.Second)
	total := int(d.Seconds() * float64(*rate))
	done := make(chan struct{})
	received := 0
	if _, err := c.Subscribe("bench.latency", "lat", func(ctx context.Context, m *consumer.Message) error {
		sent := time.Unix(0, int64(binary.BigEndian.Uint64(m.Body)))
		l := time.Since(sent)
		mu.Lock()
		if sent.After(warm) {
			lat = append(lat, l)
		}
		received++
		if received == total {
			close(done)
		}
		mu.Unlock()
		return nil
	}, consumer.Concurrency(4)); err != nil {
		return nil, err
	}
	time.Sleep(500 * time.Millisecond) // the group starts at latest: let it exist first
	body := make([]byte, messageSize)
	start := time.Now()
	sent := 0
	for sent < total {
		// Messages due by now on the schedule; then sleep to the next one.
		due := min(int(time.Since(start).Seconds()*float64(*rate))+1, total)
		for ; sent < due; sent++ {
			b := append([]byte(nil), body...)
			binary.BigEndian.PutUint64(b, uint64(time.Now().UnixNano()))
			if err := p.SendAsync(&producer.Message{Subject: "bench.latency", Body: b}, nil); err != nil {
				return nil, err
			}
		}
		next := start.Add(time.Duration(float64(sent) / float64(*rate) * float64(time.Second)))
		time.Sleep(time.Until(next))
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("received %d of %d", received, total)
	}
	p.Close(context.Background())
	c.Close(context.Background())
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) == 0 {
		return nil, fmt.Errorf("no latencies recorded")
	}
	return latencyResult{P50: lat[len(lat)/2], P99: lat[len(lat)*99/100], Max: lat[len(lat)-1], Count: len(lat)}, nil
}

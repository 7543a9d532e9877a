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
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
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
	// AckP50, AckP99: send to the producer's callback (the broker's
	// stored reply), the part of the trip before any consumer work.
	AckP50, AckP99 time.Duration
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
	env.Logf("qmq: %d messages, max %v; send to ack p50 %v p99 %v", res.Count, res.Max, res.AckP50, res.AckP99)
	env.Metric("e2e_p50_ms", float64(res.P50)/float64(time.Millisecond), "ms")
	env.Metric("e2e_p99_ms", float64(res.P99)/float64(time.Millisecond), "ms")
	return nil
}

func latencyWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("latency", flag.ContinueOnError)
	addr := fs.String("addr", "", "broker address")
	rate := fs.Int("rate", 20000, "messages per second")
	d := fs.Duration("duration", 10*time.Second, "how long to send")
	dump := fs.String("dump", "", "write each message's send time and latency (ns) to this file")
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
	var lat, ackLat []time.Duration
	var samples [][2]int64 // send time, latency: for -dump
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
			if *dump != "" {
				samples = append(samples, [2]int64{sent.UnixNano(), int64(l)})
			}
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
			now := time.Now()
			binary.BigEndian.PutUint64(b, uint64(now.UnixNano()))
			onAck := func(_ *producer.Message, err error) {
				if err == nil && now.After(warm) {
					mu.Lock()
					ackLat = append(ackLat, time.Since(now))
					mu.Unlock()
				}
			}
			if err := p.SendAsync(&producer.Message{Subject: "bench.latency", Body: b}, onAck); err != nil {
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
	if *dump != "" {
		var buf bytes.Buffer
		for _, s := range samples {
			fmt.Fprintf(&buf, "%d %d\n", s[0], s[1])
		}
		if err := os.WriteFile(*dump, buf.Bytes(), 0o644); err != nil {
			return nil, err
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	sort.Slice(ackLat, func(i, j int) bool { return ackLat[i] < ackLat[j] })
	if len(lat) == 0 || len(ackLat) == 0 {
		return nil, fmt.Errorf("no latencies recorded")
	}
	return latencyResult{P50: lat[len(lat)/2], P99: lat[len(lat)*99/100], Max: lat[len(lat)-1], Count: len(lat),
		AckP50: ackLat[len(ackLat)/2], AckP99: ackLat[len(ackLat)*99/100]}, nil
}

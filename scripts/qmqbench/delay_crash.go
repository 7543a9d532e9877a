package main

// The delay-crash suite: qmq-delay (default durable flush) is SIGKILLed 10
// times at random moments and restarted on the same data directory each
// time, while 100,000 delayed messages are pending, more are being sent and
// due ones are being forwarded to qmq-realtime. A producer and one consumer
// group run in this process. Every message whose send was acknowledged must
// reach the group.
//
//	delay_crash_lost         acknowledged but never delivered (target 0)
//	delay_crash_duplicates   deliveries beyond the first (the realtime
//	                         broker drops re-forwards within its dedupe window)
//	delay_crash_early_count  deliveries before their due time (target 0)

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/producer"
)

const (
	crashKills   = 10
	crashPending = 100_000
)

func init() {
	register("delay-crash", runDelayCrash)
}

func runDelayCrash(env *Env) error {
	rt, rtAddr, err := env.startRealtime(filepath.Join(env.Dir, "realtime"))
	if err != nil {
		return err
	}
	defer rt.stop()
	dlDir, dlAddr := filepath.Join(env.Dir, "delay"), freeAddr()
	dl, _, _, err := env.startDelay(dlDir, dlAddr, rtAddr)
	if err != nil {
		return err
	}
	defer func() { dl.stop() }()

	var (
		mu      sync.Mutex
		got     = make(map[string]int, 2*crashPending)
		acked   = make(map[string]struct{}, 2*crashPending)
		failed  atomic.Int64
		early   atomic.Int64
		lastDue atomic.Int64
	)
	c, err := consumer.New(consumer.WithBrokers(rtAddr), consumer.WithConsumerID("bench-crash"))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if _, err := c.Subscribe("bench.crash", "bench", func(ctx context.Context, m *consumer.Message) error {
		if time.Now().Before(m.DeliverAt) {
			early.Add(1)
		}
		mu.Lock()
		got[m.ID]++
		mu.Unlock()
		return nil
	}, consumer.StartEarliest(), consumer.PullBatch(256), consumer.MaxUnacked(2048)); err != nil {
		return err
	}
	p, err := producer.New(producer.WithResolver(route.NewStatic(route.Groups(rtAddr), route.Groups(dlAddr))),
		producer.WithQueueSize(50000), producer.WithBatch(256, 1<<20))
	if err != nil {
		return err
	}
	cb := func(m *producer.Message, err error) {
		if err != nil {
			failed.Add(1)
			return
		}
		mu.Lock()
		acked[m.ID] = struct{}{}
		mu.Unlock()
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	body := make([]byte, delayBodySize)
	send := func(minDelay, maxDelay time.Duration) error {
		due := time.Now().Add(minDelay + time.Duration(rng.Int64N(int64(maxDelay-minDelay))))
		if d := due.UnixNano(); d > lastDue.Load() {
			lastDue.Store(d)
		}
		return p.SendAsync(&producer.Message{Subject: "bench.crash", Body: body, DeliverAt: due}, cb)
	}
	// The pending load: due over the time the kills take.
	start := time.Now()
	for range crashPending {
		if err := send(5*time.Second, 50*time.Second); err != nil {
			return err
		}
	}
	env.Logf("qmq: %d delayed sends queued in %v", crashPending, time.Since(start).Round(time.Millisecond))
	// More sends throughout, so that some are in flight at each kill.
	stopSending := make(chan struct{})
	sending := make(chan error, 1)
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSending:
				sending <- nil
				return
			case <-tick.C:
			}
			for range 20 {
				if err := send(2*time.Second, 20*time.Second); err != nil {
					sending <- err
					return
				}
			}
		}
	}()
	for k := range crashKills {
		time.Sleep(time.Second + time.Duration(rng.Int64N(int64(4*time.Second))))
		mu.Lock()
		env.Logf("kill %d: %d acknowledged, %d delivered", k+1, len(acked), len(got))
		mu.Unlock()
		dl.kill()
		if dl, _, _, err = env.startDelay(dlDir, dlAddr, rtAddr); err != nil {
			close(stopSending)
			return fmt.Errorf("restart %d: %w", k+1, err)
		}
	}
	close(stopSending)
	if err := <-sending; err != nil {
		return err
	}
	if err := p.Close(context.Background()); err != nil {
		return err
	}
	// Wait for every acknowledged message, up to a minute past the last due.
	deadline := time.Unix(0, lastDue.Load()).Add(time.Minute)
	var lost int
	for {
		mu.Lock()
		lost = 0
		for id := range acked {
			if got[id] == 0 {
				lost++
			}
		}
		mu.Unlock()
		if lost == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // late duplicates, if any
	mu.Lock()
	dups := 0
	for _, n := range got {
		dups += n - 1
	}
	env.Logf("qmq: %d kills, %d acknowledged, %d failed sends (reported to the producer), %d delivered, %d lost, %d duplicates",
		crashKills, len(acked), failed.Load(), len(got), lost, dups)
	env.Metric("delay_crash_acked", float64(len(acked)), "msgs")
	mu.Unlock()
	env.Metric("delay_crash_lost", float64(lost), "msgs")
	env.Metric("delay_crash_duplicates", float64(dups), "msgs")
	env.Metric("delay_crash_early_count", float64(early.Load()), "msgs")
	return nil
}

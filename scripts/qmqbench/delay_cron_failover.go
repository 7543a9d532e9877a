package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/producer"
)

// The delay-control suite's failover part (issue 32): recurring schedules
// across a delay master's SIGKILL. A meta server (child process), one
// qmq-realtime and a delay group of two qmq-delay processes started with
// --wait-slave (master and slave, roles by election); producer and consumer
// resolve routes through the meta server.
// QMQ_BENCH_CRON_FAILOVER_SCHEDULES schedules (default 1,000) "@every 1s"
// run for 10 s, the delay master is SIGKILLed (10 ms after a second's
// occurrences fell due), the slave takes the group
// over, and they run 10 s more; then they are deleted.
//
//	cron_duplicates_across_failover   occurrences delivered more than once
//	                                  (target 0)
//
// The log line also counts occurrences delivered early (never) and the
// seconds of each schedule with no occurrence while no master could fire
// them (fired once late afterwards under the default missed policy).

const (
	cfSubject = "bench.cron.failover"
	cfGroup   = "cf-dl"
	cfRun     = 10 * time.Second
)

func benchCronFailover(env *Env) error {
	schedules := envInt("QMQ_BENCH_CRON_FAILOVER_SCHEDULES", 1000)
	addrs, stopMeta, err := startMetaServer(filepath.Join(env.Dir, "cf-meta"), metaFakesEnv+"=0", metaTTLEnv+"="+metaserver.NewOptions().BrokerTTL.String())
	if err != nil {
		return err
	}
	defer stopMeta()
	meta, _, _ := strings.Cut(addrs, " ")
	metas := []string{meta}
	rt := newGroupNode(env, "cf-rt", "cf-rt")
	master := newGroupNode(env, "cf-dl-a", cfGroup, "--wait-slave")
	slave := newGroupNode(env, "cf-dl-b", cfGroup, "--role", "slave", "--wait-slave")
	master.kind, slave.kind = "delay", "delay"
	defer func() {
		for _, n := range []*groupNode{master, slave, rt} {
			if n.p != nil {
				n.p.stop()
			}
		}
	}()
	if err := env.startNode(rt, metas); err != nil {
		return err
	}
	if err := waitWritableAlone(rt, 30*time.Second); err != nil {
		return err
	}
	if err := env.startNode(master, metas); err != nil {
		return err
	}
	if err := waitWritableAlone(master, 30*time.Second); err != nil {
		return err
	}
	if err := env.startNode(slave, metas); err != nil {
		return err
	}
	if err := waitRoles(master, slave, 60*time.Second); err != nil {
		return err
	}
	mc, err := metaclient.New(metas, "bench-cron-failover", metaclient.WithRefreshInterval(time.Second))
	if err != nil {
		return err
	}
	defer mc.Close()
	p, err := producer.New(producer.WithResolver(mc), producer.WithSendTimeout(30*time.Second))
	if err != nil {
		return err
	}
	defer p.Close(context.Background())

	var mu sync.Mutex
	seen := map[string]int{}
	early := 0
	c, err := consumer.New(consumer.WithResolver(mc), consumer.WithConsumerID("bench-cf-consumer"), consumer.WithRouteRefresh(time.Second))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if _, err := c.Subscribe(cfSubject, "bench", func(ctx context.Context, m *consumer.Message) error {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		seen[m.ID]++
		if seen[m.ID] == 1 && now.Before(m.DeliverAt) {
			early++
		}
		return nil
	}, consumer.StartEarliest(), consumer.PullBatch(256), consumer.MaxUnacked(4096)); err != nil {
		return err
	}
	each := func(fn func(i int) error) error {
		errs := make(chan error, 16)
		var wg sync.WaitGroup
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := w; i < schedules; i += 16 {
					if err := fn(i); err != nil {
						errs <- err
						return
					}
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
	if err := each(func(i int) error {
		s := producer.Schedule{Name: "f" + strconv.Itoa(i), Subject: cfSubject, Body: []byte("tick"), Cron: "@every 1s"}
		if err := p.CreateSchedule(context.Background(), s); err != nil {
			return err
		}
		return nil
	}); err != nil {
		return err
	}
	started := time.Now()
	// The kill lands 10 ms after a second's occurrences fell due, while
	// they are being forwarded and their next templates stored.
	time.Sleep(time.Until(started.Add(cfRun).Truncate(time.Second).Add(time.Second + 10*time.Millisecond)))
	killed := time.Now()
	master.p.kill()
	master.p = nil
	if err := waitWritableAlone(slave, 60*time.Second); err != nil {
		return err
	}
	took := time.Since(killed)
	env.Logf("delay-control: failover: %d schedules; delay master SIGKILLed %v after they started, the slave serves %v later",
		schedules, killed.Sub(started).Round(time.Millisecond), took.Round(time.Millisecond))
	time.Sleep(cfRun)
	if err := each(func(i int) error {
		for attempt := 0; ; attempt++ {
			err := p.DeleteSchedule(context.Background(), cfSubject, "f"+strconv.Itoa(i))
			if err == nil || attempt == 20 {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
	}); err != nil {
		return fmt.Errorf("delete the schedules after the failover: %w", err)
	}
	time.Sleep(3 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	dups, total := 0, 0
	perSchedule := map[string]int{}
	for id, n := range seen {
		total++
		if n > 1 {
			dups++
		}
		if i := strings.LastIndexByte(id, '.'); i > 0 {
			perSchedule[id[:i]]++
		}
	}
	fewest := -1
	for _, n := range perSchedule {
		if fewest < 0 || n < fewest {
			fewest = n
		}
	}
	env.Logf("delay-control: failover: %d occurrences delivered (%d schedules, fewest %d of one over %v), %d delivered twice, %d early",
		total, len(perSchedule), fewest, time.Since(started).Round(time.Second), dups, early)
	env.Metric("cron_duplicates_across_failover", float64(dups), "occurrences")
	return nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/producer"
)

// Suite delay-control (issue 32): control over scheduled messages. One
// qmq-realtime and one qmq-delay process (default durable flush: the
// message log is fdatasynced before a send or a cancel is answered; no
// slave); the bench process is the producer (batches of up to 256 messages,
// 16 requests in flight, SendAsync) and the consumer (one group, pull
// batches of 256).
//
//	delay_cancel_per_s             200,000 keyed messages due an hour ahead;
//	                               100,000 of them cancelled by key with
//	                               Producer.CancelBatch, 1,000 targets a
//	                               request, 8 requests in flight (target
//	                               ≥ 100,000).
//	delay_cancel_race_violations   200,000 messages due inside a 2-second
//	                               window; every other one is cancelled by
//	                               key around its due time (a canceller sends
//	                               the targets due within the next 50 ms,
//	                               1,000 a request, 4 in flight); then every
//	                               message answered cancelled must never be
//	                               delivered and every other one must be
//	                               delivered (target 0).
//	cron_lateness_p99_ms, cron_early
//	                               10,000 recurring schedules "@every 1s"
//	                               (QMQ_BENCH_CRON_SCHEDULES) for a minute
//	                               (QMQ_BENCH_CRON_SECONDS), created with
//	                               Producer.CreateSchedule from 32 goroutines;
//	                               lateness is the consumer's receive time
//	                               minus the occurrence time (target p99
//	                               ≤ 50 ms, early 0); cron_duplicates counts
//	                               occurrences delivered twice (no failover
//	                               in this run).
//
// delay_query_p99_ms and delay_rss_mb_10m_pending_1m_cancelled:
// delay_pending.go; cron_duplicates_across_failover:
// delay_cron_failover.go. QMQ_BENCH_CONTROL_PARTS (comma-separated: cancel,
// pending, race, cron, failover) runs some parts only; QMQ_BENCH_PROFILE (a directory)
// saves CPU profiles of the servers during the cancel and cron parts.

func init() { register("delay-control", runDelayControl) }

const (
	controlSubject     = "bench.control"
	controlCancelN     = 100_000
	controlCancelFill  = 200_000
	controlRaceN       = 200_000
	controlRaceWindow  = 2 * time.Second
	controlCancelBatch = 1000
)

func runDelayControl(env *Env) error {
	if controlPart("failover") {
		// Its own processes, first: a meta server and a delay group of two.
		if err := benchCronFailover(env); err != nil {
			return err
		}
	}
	if controlPart("pending") {
		// Its own servers too: the other parts' figures are not taken
		// with 10 M messages pending, nor this part's memory with theirs.
		if err := benchPendingAlone(env); err != nil {
			return err
		}
	}
	if !controlPart("cancel") && !controlPart("race") && !controlPart("cron") {
		return nil
	}
	rt, rtAddr, err := env.startRealtime(filepath.Join(env.Dir, "control-realtime"))
	if err != nil {
		return err
	}
	defer rt.stop()
	dl, dlAddr, dlHTTP, err := env.startDelay(filepath.Join(env.Dir, "control-delay"), "", rtAddr)
	if err != nil {
		return err
	}
	defer dl.stop()
	res := route.NewStatic(route.Groups(rtAddr), route.Groups(dlAddr))
	p, err := producer.New(producer.WithResolver(res), producer.WithQueueSize(50000), producer.WithMaxInFlight(16),
		producer.WithBatch(256, 1<<20), producer.WithSendTimeout(time.Minute))
	if err != nil {
		return err
	}
	defer p.Close(context.Background())
	if controlPart("cancel") {
		if err := benchCancelRate(env, p, dl, dlHTTP); err != nil {
			return err
		}
	}
	if controlPart("race") {
		if err := benchCancelRace(env, p, rtAddr, dl.cmd.Process.Pid); err != nil {
			return err
		}
	}
	if controlPart("cron") {
		if err := benchCron(env, p, rtAddr, dlHTTP, cronProcs{delay: dl, realtime: rt}); err != nil {
			return err
		}
	}
	return nil
}

// controlPart reports whether QMQ_BENCH_CONTROL_PARTS (a comma-separated
// list; default every part) names part.
func controlPart(part string) bool { return suitePart("QMQ_BENCH_CONTROL_PARTS", part) }

// suitePart reports whether the environment variable name (a
// comma-separated list of a suite's parts; unset: every part) names part.
func suitePart(name, part string) bool {
	v := os.Getenv(name)
	if v == "" {
		return true
	}
	for _, p := range strings.Split(v, ",") {
		if strings.TrimSpace(p) == part {
			return true
		}
	}
	return false
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// cronProcs are the servers whose CPU the cron part reports.
type cronProcs struct{ delay, realtime *process }

func benchCron(env *Env, p *producer.Producer, rtAddr, dlHTTP string, procs cronProcs) error {
	schedules := envInt("QMQ_BENCH_CRON_SCHEDULES", 10_000)
	seconds := envInt("QMQ_BENCH_CRON_SECONDS", 60)
	subject := "bench.cron"
	// The handler only notes each delivery: its time is taken first, and
	// the ids are counted after the run (a map of 600,000 ids updated in
	// the handler, under mu, took a fifth of the bench's CPU in the cron
	// part and delayed the deliveries behind it).
	type delivery struct {
		id      string
		due, at int64 // Unix microseconds
	}
	var mu sync.Mutex
	deliveries := make([]delivery, 0, schedules*(seconds+5))
	c, err := consumer.New(consumer.WithBrokers(rtAddr), consumer.WithConsumerID("bench-cron-consumer"))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if _, err := c.Subscribe(subject, "bench", func(ctx context.Context, m *consumer.Message) error {
		now := time.Now().UnixMicro()
		mu.Lock()
		deliveries = append(deliveries, delivery{id: m.ID, due: m.DeliverAt.UnixMicro(), at: now})
		mu.Unlock()
		return nil
	}, consumer.StartEarliest(), consumer.PullBatch(256), consumer.MaxUnacked(4096)); err != nil {
		return err
	}
	create := func(fn func(i int) error) error {
		var next atomic.Int64
		var firstErr atomic.Value
		var wg sync.WaitGroup
		for w := 0; w < 32; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1)) - 1; i < schedules; i = int(next.Add(1)) - 1 {
					if err := fn(i); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if err, _ := firstErr.Load().(error); err != nil {
			return err
		}
		return nil
	}
	start := time.Now()
	if err := create(func(i int) error {
		return p.CreateSchedule(context.Background(), producer.Schedule{Name: "s" + strconv.Itoa(i), Subject: subject, Body: []byte("tick"), Cron: "@every 1s"})
	}); err != nil {
		return err
	}
	env.Logf("delay-control: %d schedules created in %v", schedules, time.Since(start).Round(time.Millisecond))
	env.logLoad()
	if dir := os.Getenv("QMQ_BENCH_PROFILE"); dir != "" {
		go saveProfile(env, dlHTTP, filepath.Join(dir, "delay-cron.pprof"), min(seconds/2, 10))
		go saveProfile(env, argValue(procs.realtime, "--http-addr"), filepath.Join(dir, "realtime-cron.pprof"), min(seconds/2, 10))
		go saveSelfProfile(env, filepath.Join(dir, "bench-cron.pprof"), min(seconds/2, 10))
	}
	cpuDelay, cpuRealtime, cpuSelf := processCPU(procs.delay.cmd.Process.Pid), processCPU(procs.realtime.cmd.Process.Pid), processCPU(os.Getpid())
	mu.Lock()
	before := len(deliveries)
	mu.Unlock()
	time.Sleep(time.Duration(seconds) * time.Second)
	mu.Lock()
	if n := len(deliveries) - before; n > 0 {
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
		env.Logf("delay-control: cron: CPU per occurrence: qmq-delay %.1f µs, qmq-realtime %.1f µs, bench (consumer) %.1f µs",
			per(processCPU(procs.delay.cmd.Process.Pid)-cpuDelay), per(processCPU(procs.realtime.cmd.Process.Pid)-cpuRealtime), per(processCPU(os.Getpid())-cpuSelf))
	}
	mu.Unlock()
	env.logHistograms(dlHTTP, "qmq_delay_fire_lateness_seconds", "qmq_delay_forward_lateness_seconds")
	if err := create(func(i int) error {
		return p.DeleteSchedule(context.Background(), subject, "s"+strconv.Itoa(i))
	}); err != nil {
		return err
	}
	time.Sleep(3 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	seen := make(map[string]int, len(deliveries))
	lateness := make([]int64, 0, len(deliveries)) // microseconds, of first deliveries
	dups, early := 0, 0
	for _, d := range deliveries {
		seen[d.id]++
		switch seen[d.id] {
		case 1:
			lateness = append(lateness, d.at-d.due)
			if d.at < d.due {
				early++
			}
		case 2:
			dups++
		}
	}
	p50, p99, maxMs := percentilesMs(lateness)
	env.Logf("delay-control: cron: %d occurrences of %d schedules over %d s; lateness p50 %.1f ms, p99 %.1f ms, max %.1f ms",
		len(lateness), schedules, seconds, p50, p99, maxMs)
	env.Metric("cron_lateness_p99_ms", p99, "ms")
	env.Metric("cron_early", float64(early), "occurrences")
	env.Metric("cron_duplicates", float64(dups), "occurrences")
	return nil
}

// fillKeyed sends n messages of subject with keys prefix-i, due at due(i),
// and waits until all are stored.
func fillKeyed(p *producer.Producer, subject, prefix string, n int, due func(i int) time.Time) error {
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	cb := func(_ *producer.Message, err error) {
		if err != nil {
			if failed.Add(1) == 1 {
				firstErr.Store(err)
			}
		}
		wg.Done()
	}
	for i := 0; i < n; i++ {
		m := &producer.Message{Subject: subject, Body: []byte(strconv.Itoa(i)), DeliverAt: due(i)}
		producer.SetScheduleKey(m, prefix+strconv.Itoa(i))
		wg.Add(1)
		if err := p.SendAsync(m, cb); err != nil {
			return err
		}
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("%d of %d sends failed, first: %v", f, n, firstErr.Load())
	}
	return nil
}

func benchCancelRate(env *Env, p *producer.Producer, dl *process, dlHTTP string) error {
	due := time.Now().Add(time.Hour)
	start := time.Now()
	if err := fillKeyed(p, controlSubject+".rate", "r", controlCancelFill, func(int) time.Time { return due }); err != nil {
		return err
	}
	env.Logf("delay-control: %d keyed messages stored in %v", controlCancelFill, time.Since(start).Round(time.Millisecond))
	env.logLoad()
	if dir := os.Getenv("QMQ_BENCH_PROFILE"); dir != "" {
		go saveProfile(env, dlHTTP, filepath.Join(dir, "delay-cancel.pprof"), 1)
	}
	var next atomic.Int64
	var bad atomic.Int64
	var wg sync.WaitGroup
	cpuDelay, cpuSelf := processCPU(dl.cmd.Process.Pid), processCPU(os.Getpid())
	start = time.Now()
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				from := int(next.Add(controlCancelBatch)) - controlCancelBatch
				if from >= controlCancelN {
					return
				}
				targets := make([]producer.CancelTarget, 0, controlCancelBatch)
				for i := from; i < min(from+controlCancelBatch, controlCancelN); i++ {
					targets = append(targets, producer.CancelTarget{Subject: controlSubject + ".rate", Key: "r" + strconv.Itoa(2*i)})
				}
				for _, err := range p.CancelBatch(context.Background(), targets) {
					if err != nil {
						bad.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if b := bad.Load(); b > 0 {
		return fmt.Errorf("%d of %d cancels of pending messages were not answered cancelled", b, controlCancelN)
	}
	env.Logf("delay-control: %d cancels in %v; CPU per cancel: qmq-delay %.1f µs, bench (producer) %.1f µs", controlCancelN, elapsed.Round(time.Millisecond),
		float64((processCPU(dl.cmd.Process.Pid)-cpuDelay).Microseconds())/controlCancelN, float64((processCPU(os.Getpid())-cpuSelf).Microseconds())/controlCancelN)
	env.Metric("delay_cancel_per_s", float64(controlCancelN)/elapsed.Seconds(), "cancels/s")
	return nil
}

func benchCancelRace(env *Env, p *producer.Producer, rtAddr string, delayPid int) error {
	subject := controlSubject + ".race"
	delivered := make([]atomic.Int32, controlRaceN)
	var received atomic.Int64
	c, err := consumer.New(consumer.WithBrokers(rtAddr), consumer.WithConsumerID("bench-control-consumer"))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if _, err := c.Subscribe(subject, "bench", func(ctx context.Context, m *consumer.Message) error {
		if i, err := strconv.Atoi(string(m.Body)); err == nil && i >= 0 && i < controlRaceN {
			if delivered[i].Add(1) == 1 {
				received.Add(1)
			}
		}
		return nil
	}, consumer.StartEarliest(), consumer.PullBatch(256), consumer.MaxUnacked(2048)); err != nil {
		return err
	}
	// The window opens once the fill is surely done (about 200,000 sends at
	// the rate the first part measured, with room for a slow machine).
	window := time.Now().Add(30 * time.Second).Truncate(time.Second)
	due := func(i int) time.Time { return window.Add(time.Duration(i) * controlRaceWindow / controlRaceN) }
	if err := fillKeyed(p, subject, "x", controlRaceN, due); err != nil {
		return err
	}
	if time.Now().After(window.Add(-time.Second)) {
		return errors.New("delay-control: the fill ran into the race window; the machine is too slow for this run")
	}
	env.Logf("delay-control: %d messages due in [%s, +%v)", controlRaceN, window.Format("15:04:05.000"), controlRaceWindow)
	answers := make([]error, controlRaceN)
	// Cancel every other message, each batch sent 50 ms before its first
	// target is due: the later targets of a batch race their firing.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for from := 0; from < controlRaceN; from += 2 * controlCancelBatch {
		to := min(from+2*controlCancelBatch, controlRaceN)
		if wait := time.Until(due(from).Add(-50 * time.Millisecond)); wait > 0 {
			time.Sleep(wait)
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(from, to int) {
			defer func() { <-sem; wg.Done() }()
			var targets []producer.CancelTarget
			var idx []int
			for i := from; i < to; i += 2 {
				targets = append(targets, producer.CancelTarget{Subject: subject, Key: "x" + strconv.Itoa(i)})
				idx = append(idx, i)
			}
			for k, err := range p.CancelBatch(context.Background(), targets) {
				answers[idx[k]] = err
			}
		}(from, to)
	}
	wg.Wait()
	cancelled, fired, other := 0, 0, 0
	for i := 0; i < controlRaceN; i += 2 {
		switch {
		case answers[i] == nil:
			cancelled++
		case errors.Is(answers[i], producer.ErrAlreadyFired):
			fired++
		default:
			other++
		}
	}
	want := int64(controlRaceN - cancelled)
	deadline := time.Now().Add(2 * time.Minute)
	for received.Load() < want && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // a cancelled message delivered late would show now
	violations := 0
	for i := 0; i < controlRaceN; i++ {
		n := delivered[i].Load()
		switch {
		case i%2 == 0 && answers[i] == nil && n > 0: // cancelled, yet delivered
			violations++
		case i%2 == 0 && errors.Is(answers[i], producer.ErrAlreadyFired) && n == 0: // fired, never delivered
			violations++
		case i%2 == 1 && n == 0: // never cancelled, never delivered
			violations++
		}
	}
	env.Logf("delay-control: race: %d answered cancelled, %d already fired, %d other errors; %d of %d expected delivered",
		cancelled, fired, other, received.Load(), want)
	if rss, err := vmRSSKB(delayPid); err == nil {
		env.Logf("delay-control: qmq-delay VmRSS %d MB", rss/1024)
	}
	if other > 0 {
		fmt.Fprintf(os.Stderr, "# delay-control: first other error: %v\n", firstOther(answers))
	}
	env.Metric("delay_cancel_race_violations", float64(violations), "messages")
	return nil
}

func firstOther(answers []error) error {
	for i := 0; i < len(answers); i += 2 {
		if answers[i] != nil && !errors.Is(answers[i], producer.ErrAlreadyFired) {
			return answers[i]
		}
	}
	return nil
}

// saveProfile writes a CPU profile of the server at httpAddr (seconds
// long) to path (QMQ_BENCH_PROFILE names the directory).
func saveProfile(env *Env, httpAddr, path string, seconds int) {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", httpAddr, seconds))
	if err != nil {
		env.Logf("profile: %v", err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		env.Logf("profile: %v", err)
	}
}

// saveSelfProfile writes a CPU profile of this process (the bench's
// consumer and producer) over the next seconds.
func saveSelfProfile(env *Env, path string, seconds int) {
	f, err := os.Create(path)
	if err != nil {
		env.Logf("profile: %v", err)
		return
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		env.Logf("profile: %v", err)
		return
	}
	time.Sleep(time.Duration(seconds) * time.Second)
	pprof.StopCPUProfile()
}

// argValue returns the value following name in p's command line.
func argValue(p *process, name string) string {
	for i, a := range p.cmd.Args {
		if a == name && i+1 < len(p.cmd.Args) {
			return p.cmd.Args[i+1]
		}
	}
	return ""
}

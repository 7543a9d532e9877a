package main

// The delay suites: delayed messages travel producer → qmq-delay (default
// durable flush: fsync before the ack) → qmq-realtime → one consumer group,
// and each one's lateness (time received by the consumer − due time) is
// measured by the consumer process. Peers run the same test through
// scripts/peers/delaypeer: nsqd DPUB and NATS 2.15 `@at` schedules (one
// subject per schedule, a stream with allow_msg_schedules).
//
//	delay               1,000,000 pending, delays uniform in 5–65 s:
//	  delay_lateness_p50_ms, delay_lateness_p99_ms (target p99 ≤ 50),
//	  delay_early_count (target 0); then 100,000 pending, ours and the peers
//	  at the same time (they see the same machine stalls):
//	  delay_p99_vs_nsqd_ratio, delay_p99_vs_nats_ratio (ours / theirs,
//	  target ≤ 0.25 each) with every p50/p99 printed.
//	delay-capacity      10,000,000 pending spread over 30 days:
//	  delay_rss_mb_10m_pending (VmRSS of qmq-delay once settled, target ≤ 300).
//	delay-burst         1,000,000 messages due in the same second:
//	  delay_burst_seconds, due time → the group has received all (target ≤ 10).
//	delay-crash         (delay_crash.go) 10 SIGKILLs with 100,000 pending:
//	  delay_crash_lost (target 0), delay_crash_duplicates.
//
// Our load generators are worker processes with GOMAXPROCS=1: several
// delay-fill workers (so that filling a million is quick) and one
// delay-consume worker that subscribes before the fill starts.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/producer"
)

const (
	delayBodySize     = 64
	delayPending      = 1_000_000
	delayPeerPending  = 100_000
	delayMin          = 5 * time.Second
	delayMax          = 65 * time.Second
	delayFillWorkers  = 2
	delaySubject      = "bench.delay"
	delayCapacity     = 10_000_000
	delayCapacitySpan = 30 * 24 * time.Hour
	delayBurst        = 1_000_000
)

func init() {
	register("delay", runDelay)
	register("delay-capacity", runDelayCapacity)
	register("delay-burst", runDelayBurst)
	registerWorker("delay-fill", delayFillWorker)
	registerWorker("delay-consume", delayConsumeWorker)
}

// startDelay runs bin/qmq-delay with its data under dir, forwarding to the
// realtime broker at realtime, on addr (empty: a free port), and waits until
// it is ready. It returns the process, its client address and its HTTP
// address.
func (e *Env) startDelay(dir, addr, realtime string, extra ...string) (*process, string, string, error) {
	if addr == "" {
		addr = freeAddr()
	}
	httpAddr := freeAddr()
	args := append([]string{"--addr", addr, "--http-addr", httpAddr, "--data-dir", dir, "--realtime", realtime,
		"--log-level", "warn"}, extra...)
	p, err := startProcess("qmq-delay", filepath.Join(e.Bin, "qmq-delay"), args...)
	if err != nil {
		return nil, "", "", err
	}
	if err := p.waitHTTP("http://"+httpAddr+"/readyz", 120*time.Second); err != nil {
		p.kill()
		return nil, "", "", err
	}
	return p, addr, httpAddr, nil
}

// latenessResult is what delay-consume and delaypeer report. Times are in
// milliseconds; Early counts deliveries before their due time.
type latenessResult struct {
	System     string  `json:"system"`
	Published  int64   `json:"published"`
	Received   int64   `json:"received"`
	Duplicates int64   `json:"duplicates"`
	Early      int64   `json:"early"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	// LastUnixNano is when the last first-delivery arrived.
	LastUnixNano int64 `json:"last_unix_nano"`
}

// delayRun is one of our delay measurements: a realtime broker and a delay
// server, one consumer worker and fill workers.
type delayRun struct {
	count   int64
	min     time.Duration // each message is due min..max after its send
	max     time.Duration
	at      time.Time // when set, every message is due at this time instead
	timeout time.Duration
}

func (e *Env) runDelayOurs(dir string, r delayRun) (latenessResult, error) {
	var res latenessResult
	e.logLoad()
	defer e.logLoad()
	rt, rtAddr, err := e.startRealtime(filepath.Join(dir, "realtime"))
	if err != nil {
		return res, err
	}
	defer rt.stop()
	dl, dlAddr, dlHTTP, err := e.startDelay(filepath.Join(dir, "delay"), "", rtAddr)
	if err != nil {
		return res, err
	}
	defer dl.stop()
	defer e.logHistograms(dlHTTP, "qmq_delay_fire_lateness_seconds", "qmq_delay_forward_lateness_seconds")
	defer e.logHistograms(argAfter(rt.cmd.Args, "--http-addr"), "qmq_realtime_append_seconds")
	probe := startWakeupProbe()
	defer func() {
		p50, p99, maxMs, stalled := probe.stop()
		e.Logf("machine wakeup lateness (a goroutine sleeping 5 ms, in this process): p50 %.1f ms, p99 %.1f ms, max %.1f ms; "+
			"stalled > 20 ms for %.2f%% of the time", p50, p99, maxMs, 100*stalled)
	}()
	consumed := make(chan error, 1)
	go func() {
		consumed <- runWorker("delay-consume", &res, "-addr", rtAddr, "-subject", delaySubject,
			"-count", fmt.Sprint(r.count), "-timeout", r.timeout.String())
	}()
	fill, err := e.fillDelay(rtAddr, dlAddr, r)
	if err != nil {
		return res, err
	}
	e.Logf("qmq: stored %d delayed messages in %v (%.0f msg/s)", fill.Messages, fill.Elapsed.Round(time.Millisecond), fill.rate())
	if !r.at.IsZero() && time.Now().After(r.at) {
		return res, fmt.Errorf("storing took %v: past the common due time, the burst is not a burst", fill.Elapsed)
	}
	if err := <-consumed; err != nil {
		return res, err
	}
	res.Published = fill.Messages
	return res, nil
}

// fillDelay sends r.count delayed messages through delayFillWorkers
// workers at once and sums their results.
func (e *Env) fillDelay(rtAddr, dlAddr string, r delayRun) (rateResult, error) {
	var (
		mu    sync.Mutex
		total rateResult
		first error
		wg    sync.WaitGroup
	)
	start := time.Now()
	for w := range delayFillWorkers {
		n := r.count / delayFillWorkers
		if w == 0 {
			n += r.count % delayFillWorkers
		}
		args := []string{"-realtime", rtAddr, "-delay", dlAddr, "-count", fmt.Sprint(n),
			"-min", r.min.String(), "-max", r.max.String(), "-seed", fmt.Sprint(w + 1)}
		if !r.at.IsZero() {
			args = append(args, "-at", fmt.Sprint(r.at.UnixMilli()))
		}
		wg.Go(func() {
			var res rateResult
			err := runWorker("delay-fill", &res, args...)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			total.Messages += res.Messages
			total.Failed += res.Failed
		})
	}
	wg.Wait()
	total.Elapsed = time.Since(start)
	if first != nil {
		return total, first
	}
	if total.Failed > 0 {
		return total, fmt.Errorf("%d delayed sends failed", total.Failed)
	}
	return total, nil
}

func delayFillWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("delay-fill", flag.ContinueOnError)
	rtAddr := fs.String("realtime", "", "realtime broker address")
	dlAddr := fs.String("delay", "", "delay server address")
	count := fs.Int64("count", 0, "messages to send")
	minDelay := fs.Duration("min", delayMin, "shortest delay after the send")
	maxDelay := fs.Duration("max", delayMax, "longest delay after the send")
	at := fs.Int64("at", 0, "unix milliseconds every message is due at (instead of -min/-max)")
	seed := fs.Uint64("seed", 1, "random seed")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	res := route.NewStatic(route.Groups(*rtAddr), route.Groups(*dlAddr))
	p, err := producer.New(producer.WithResolver(res), producer.WithQueueSize(50000), producer.WithMaxInFlight(16),
		producer.WithBatch(256, 1<<20))
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(*seed, 0x5eed))
	body := make([]byte, delayBodySize)
	var ok, failed atomic.Int64
	cb := func(_ *producer.Message, err error) {
		if err != nil {
			failed.Add(1)
		} else {
			ok.Add(1)
		}
	}
	span := int64(*maxDelay - *minDelay)
	start := time.Now()
	for i := int64(0); i < *count; i++ {
		var due time.Time
		if *at != 0 {
			due = time.UnixMilli(*at)
		} else {
			due = time.Now().Add(*minDelay + time.Duration(rng.Int64N(span+1)))
		}
		if err := p.SendAsync(&producer.Message{Subject: delaySubject, Body: body, DeliverAt: due}, cb); err != nil {
			return nil, err
		}
	}
	if err := p.Close(context.Background()); err != nil {
		return nil, err
	}
	return rateResult{Messages: ok.Load(), Failed: failed.Load(), Elapsed: time.Since(start)}, nil
}

func delayConsumeWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("delay-consume", flag.ContinueOnError)
	addr := fs.String("addr", "", "realtime broker address")
	subject := fs.String("subject", delaySubject, "subject")
	count := fs.Int64("count", 0, "distinct messages to receive")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c, err := consumer.New(consumer.WithBrokers(*addr), consumer.WithConsumerID("bench-delay-consumer"))
	if err != nil {
		return nil, err
	}
	var (
		mu       sync.Mutex
		seen     = make(map[string]struct{}, *count)
		lateness = make([]int64, 0, *count) // microseconds
		res      = latenessResult{System: "qmq"}
		done     = make(chan struct{})
	)
	_, err = c.Subscribe(*subject, "bench", func(ctx context.Context, m *consumer.Message) error {
		now := time.Now()
		late := now.Sub(m.DeliverAt)
		mu.Lock()
		defer mu.Unlock()
		if late < 0 {
			res.Early++
		}
		if _, dup := seen[m.ID]; dup {
			res.Duplicates++
			return nil
		}
		seen[m.ID] = struct{}{}
		lateness = append(lateness, late.Microseconds())
		res.LastUnixNano = now.UnixNano()
		if int64(len(lateness)) == *count {
			close(done)
		}
		return nil
	}, consumer.StartEarliest(), consumer.PullBatch(256), consumer.MaxUnacked(2048))
	if err != nil {
		return nil, err
	}
	select {
	case <-done:
	case <-time.After(*timeout):
	}
	c.Close(context.Background())
	mu.Lock()
	defer mu.Unlock()
	res.Received = int64(len(lateness))
	res.P50Ms, res.P99Ms, res.MaxMs = percentilesMs(lateness)
	if res.Received < *count {
		return nil, fmt.Errorf("received %d of %d in %v (p50 %.1f ms, p99 %.1f ms so far)", res.Received, *count, *timeout, res.P50Ms, res.P99Ms)
	}
	return res, nil
}

// percentilesMs returns the p50, p99 and max of micros, in milliseconds.
func percentilesMs(micros []int64) (p50, p99, maxMs float64) {
	if len(micros) == 0 {
		return 0, 0, 0
	}
	sort.Slice(micros, func(i, j int) bool { return micros[i] < micros[j] })
	at := func(q float64) float64 {
		i := int(q * float64(len(micros)-1))
		return float64(micros[i]) / 1000
	}
	return at(0.50), at(0.99), float64(micros[len(micros)-1]) / 1000
}

func runDelay(env *Env) error {
	timeout := delayMax + 2*time.Minute
	env.Logf("qmq: %d pending, delays uniform in %v–%v", delayPending, delayMin, delayMax)
	big, err := env.runDelayOurs(filepath.Join(env.Dir, "qmq-1m"), delayRun{count: delayPending, min: delayMin, max: delayMax, timeout: timeout})
	if err != nil {
		return err
	}
	env.Logf("qmq 1M: %+v", big)
	env.Metric("delay_lateness_p50_ms", big.P50Ms, "ms")
	env.Metric("delay_lateness_p99_ms", big.P99Ms, "ms")
	env.Metric("delay_lateness_max_ms", big.MaxMs, "ms")
	env.Metric("delay_early_count", float64(big.Early), "msgs")
	env.Metric("delay_duplicates", float64(big.Duplicates), "msgs")

	// The 100,000 runs of ours, nsqd and NATS run at the same time, each
	// with its own servers and client processes: this machine is shared and
	// stalls now and then for up to seconds (see the wakeup probe), and a
	// stall shows in a p99; run together, the three see the same stalls.
	// Their load together (3 × ~1,700 deliveries/s once filled) is light,
	// but they share the disk: NATS's file store writes delay our realtime
	// broker's fsyncs (the append histogram shows it), while neither peer
	// fsyncs and so neither is delayed by our writes.
	env.Logf("qmq, nsqd, NATS at once: %d pending each, delays uniform in %v–%v", delayPeerPending, delayMin, delayMax)
	var (
		ours, nsq, nats          latenessResult
		oursErr, nsqErr, natsErr error
		wg                       sync.WaitGroup
	)
	// delaypeer waits 5.5 s for nsqd's channel refresh before it publishes:
	// the others start that much later, so that the three fill at the same
	// time, not one while another's messages fall due.
	wg.Go(func() { nsq, nsqErr = env.runDelayPeer("nsq", filepath.Join(env.Dir, "nsq"), timeout) })
	time.Sleep(5500 * time.Millisecond)
	wg.Go(func() {
		ours, oursErr = env.runDelayOurs(filepath.Join(env.Dir, "qmq-100k"),
			delayRun{count: delayPeerPending, min: delayMin, max: delayMax, timeout: timeout})
	})
	wg.Go(func() { nats, natsErr = env.runDelayPeer("nats", filepath.Join(env.Dir, "nats"), timeout) })
	wg.Wait()
	if err := errors.Join(oursErr, nsqErr, natsErr); err != nil {
		return err
	}
	env.Logf("qmq 100k: %+v", ours)
	env.Metric("delay_100k_lateness_p50_ms", ours.P50Ms, "ms")
	env.Metric("delay_100k_lateness_p99_ms", ours.P99Ms, "ms")
	env.Metric("delay_100k_early_count", float64(ours.Early), "msgs")
	env.Metric("delay_nsqd_lateness_p50_ms", nsq.P50Ms, "ms")
	env.Metric("delay_nsqd_lateness_p99_ms", nsq.P99Ms, "ms")
	env.Metric("delay_nsqd_early_count", float64(nsq.Early), "msgs")
	env.Metric("delay_p99_vs_nsqd_ratio", ours.P99Ms/nsq.P99Ms, "x")
	env.Metric("delay_nats_lateness_p50_ms", nats.P50Ms, "ms")
	env.Metric("delay_nats_lateness_p99_ms", nats.P99Ms, "ms")
	env.Metric("delay_nats_early_count", float64(nats.Early), "msgs")
	env.Metric("delay_p99_vs_nats_ratio", ours.P99Ms/nats.P99Ms, "x")
	return nil
}

// runDelayPeer starts nsqd or nats-server and runs delaypeer against it
// with delayPeerPending messages.
func (e *Env) runDelayPeer(system, dir string, timeout time.Duration) (latenessResult, error) {
	var res latenessResult
	tool, err := e.peerBin("delaypeer")
	if err != nil {
		return res, err
	}
	e.logLoad()
	defer e.logLoad()
	probe := startWakeupProbe()
	defer func() {
		p50, p99, maxMs, stalled := probe.stop()
		e.Logf("machine wakeup lateness during %s: p50 %.1f ms, p99 %.1f ms, max %.1f ms; stalled > 20 ms for %.2f%% of the time",
			system, p50, p99, maxMs, 100*stalled)
	}()
	var args []string
	switch system {
	case "nsq":
		p, tcp, httpAddr, err := e.startNSQD(dir)
		if err != nil {
			return res, err
		}
		defer p.stop()
		args = []string{"-system", "nsq", "-addr", tcp, "-http", httpAddr}
	case "nats":
		p, addr, err := e.startNATS(dir)
		if err != nil {
			return res, err
		}
		defer p.stop()
		args = []string{"-system", "nats", "-addr", addr}
	}
	args = append(args, "-count", fmt.Sprint(delayPeerPending), "-min", delayMin.String(), "-max", delayMax.String(),
		"-timeout", timeout.String())
	out, err := runToolEnv(context.Background(), []string{"GOMAXPROCS=1"}, tool, args...)
	if err != nil {
		return res, err
	}
	line := lastLine(out)
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "result ")), &res); err != nil {
		return res, fmt.Errorf("delaypeer %s: %w: %s", system, err, tail(out))
	}
	e.Logf("%s 100k: %s", system, line)
	if res.Received < res.Published {
		return res, fmt.Errorf("delaypeer %s: received %d of %d", system, res.Received, res.Published)
	}
	return res, nil
}

func runDelayCapacity(env *Env) error {
	rt, rtAddr, err := env.startRealtime(filepath.Join(env.Dir, "realtime"))
	if err != nil {
		return err
	}
	defer rt.stop()
	dl, dlAddr, _, err := env.startDelay(filepath.Join(env.Dir, "delay"), "", rtAddr)
	if err != nil {
		return err
	}
	defer dl.stop()
	pid := dl.cmd.Process.Pid
	var peak atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if kb, err := vmRSSKB(pid); err == nil && kb > peak.Load() {
				peak.Store(kb)
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	env.Logf("qmq: storing %d messages due uniformly over the next %v", delayCapacity, delayCapacitySpan)
	fill, err := env.fillDelay(rtAddr, dlAddr, delayRun{count: delayCapacity, min: time.Minute, max: delayCapacitySpan})
	close(stopSampling)
	<-sampled
	if err != nil {
		return err
	}
	env.Logf("qmq: stored %d in %v (%.0f msg/s); peak VmRSS while storing %.0f MB", fill.Messages,
		fill.Elapsed.Round(time.Millisecond), fill.rate(), float64(peak.Load())/1024)
	// Settle: the server has acknowledged every message; give its
	// background work (replay into schedule files, GC, scavenger) time, and
	// report the RSS once it stops falling.
	var kb int64
	for i := range 30 {
		time.Sleep(time.Second)
		now, err := vmRSSKB(pid)
		if err != nil {
			return err
		}
		if i >= 10 && now >= kb {
			kb = now
			break
		}
		kb = now
	}
	env.Metric("delay_capacity_store_msgs_per_s", fill.rate(), "msg/s")
	env.Metric("delay_rss_peak_mb_while_storing", float64(peak.Load())/1024, "MB")
	env.Metric("delay_rss_mb_10m_pending", float64(kb)/1024, "MB")
	return nil
}

// argAfter returns the argument after flag in args ("" if none).
func argAfter(args []string, flag string) string {
	for i, a := range args[:max(len(args)-1, 0)] {
		if a == flag {
			return args[i+1]
		}
	}
	return ""
}

// logHistograms logs histograms of the server at httpAddr as the share of
// observations within each bucket: the delay server's own lateness (due →
// out of the wheel, due → stored by the realtime broker) and the realtime
// broker's append time (fsync included) show where our lateness comes from.
func (e *Env) logHistograms(httpAddr string, names ...string) {
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		e.Logf("metrics: %v", err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, name := range names {
		var buckets []string
		var counts []float64
		total := 0.0
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, name+"_bucket{"); ok {
				i := strings.Index(rest, `le="`)
				j := strings.LastIndexByte(rest, ' ')
				if i < 0 || j < 0 {
					continue
				}
				le := rest[i+4:]
				le = le[:strings.IndexByte(le, '"')]
				n, _ := strconv.ParseFloat(rest[j+1:], 64)
				buckets, counts = append(buckets, le), append(counts, n)
			} else if rest, ok := strings.CutPrefix(line, name+"_count"); ok {
				if j := strings.LastIndexByte(rest, ' '); j >= 0 {
					total, _ = strconv.ParseFloat(rest[j+1:], 64)
				}
			}
		}
		if total == 0 {
			continue
		}
		var sb strings.Builder
		for i, le := range buckets {
			fmt.Fprintf(&sb, " ≤%ss:%.2f%%", le, 100*counts[i]/total)
		}
		e.Logf("%s (%.0f):%s", name, total, sb.String())
	}
}

// wakeupProbe measures how late a goroutine sleeping 5 ms wakes up: the
// machine's scheduling noise while a delay test runs (a lateness tail the
// servers cannot do better than).
type wakeupProbe struct {
	quit chan struct{}
	done chan []int64
}

func startWakeupProbe() *wakeupProbe {
	w := &wakeupProbe{quit: make(chan struct{}), done: make(chan []int64, 1)}
	go func() {
		var late []int64
		for {
			select {
			case <-w.quit:
				w.done <- late
				return
			default:
			}
			t := time.Now()
			time.Sleep(5 * time.Millisecond)
			late = append(late, (time.Since(t) - 5*time.Millisecond).Microseconds())
		}
	}()
	return w
}

// stop ends the probe and returns its p50, p99 and max in milliseconds,
// and the share of the time the machine let it oversleep by more than
// 20 ms: messages due then cannot be on time, whoever delivers them.
func (w *wakeupProbe) stop() (p50, p99, maxMs, stalledShare float64) {
	close(w.quit)
	late := <-w.done
	var total, stalled int64
	for _, l := range late {
		total += l + 5000
		if l > 20_000 {
			stalled += l
		}
	}
	p50, p99, maxMs = percentilesMs(late)
	if total > 0 {
		stalledShare = float64(stalled) / float64(total)
	}
	return p50, p99, maxMs, stalledShare
}

// logLoad logs the machine's load average: the machine is shared, and a
// lateness tail means little without it.
func (e *Env) logLoad() {
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		e.Logf("load average: %s", strings.TrimSpace(string(b)))
	}
}

// vmRSSKB reads VmRSS of pid from /proc/PID/status, in KiB.
func vmRSSKB(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

func runDelayBurst(env *Env) error {
	// Every message is due at the same second, far enough ahead that the
	// fill is done before it.
	due := time.Now().Add(45 * time.Second).Truncate(time.Second)
	env.Logf("qmq: %d messages all due at %s", delayBurst, due.Format(time.RFC3339))
	res, err := env.runDelayOurs(filepath.Join(env.Dir, "qmq"), delayRun{count: delayBurst, at: due, timeout: 3 * time.Minute})
	if err != nil {
		return err
	}
	env.Logf("qmq burst: %+v", res)
	env.Metric("delay_burst_early_count", float64(res.Early), "msgs")
	env.Metric("delay_burst_seconds", time.Unix(0, res.LastUnixNano).Sub(due).Seconds(), "s")
	return nil
}

package main

// The delay-window suite: what the delay server's loaded window costs.
//
//	delay-window        10,000,000 messages (QMQ_BENCH_DELAY_WINDOW_COUNT), every
//	  one due 15–25 min after its send, so all of them are inside the loaded
//	  window (default 30 min: a message enters the wheel when it is stored
//	  once its hour is loaded up to its due time, which is at least 25 min
//	  ahead) and none is due while the suite measures:
//	  delay_rss_mb_window_baseline (VmRSS of qmq-delay, started and settled,
//	  nothing stored), delay_rss_mb_10m_in_window (VmRSS once every message
//	  is in the wheel and the RSS has settled; target ≤ 400),
//	  delay_window_bytes_per_msg ((loaded − baseline) / messages; the issue's
//	  ~35 B a message in all), delay_rss_peak_mb_while_storing_window.
//
// Each side: one qmq-realtime (it receives nothing: no message falls due)
// and one qmq-delay with its defaults (durable flush: fdatasync before each
// ack, group commit; window 30 min, tick 500 ms). delayFillWorkers delay-fill
// worker processes (GOMAXPROCS=1) each keep 16 batches of 256 messages
// (64-byte bodies) in flight to the delay server. The suite then polls the
// server's /metrics until qmq_delay_messages_in_wheel equals the count
// (everything acknowledged has been replayed into the hour files and the
// wheel), and reads VmRSS once a second until it stops falling (at least 10
// s). It fails, rather than report, when the fill took so long that
// messages could have fallen due before the measurement ends.

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

const (
	delayWindowCount = 10_000_000
	delayWindowMin   = 15 * time.Minute
	delayWindowMax   = 25 * time.Minute
)

func init() {
	register("delay-window", runDelayWindow)
}

func runDelayWindow(env *Env) error {
	count := int64(delayWindowCount)
	if v := os.Getenv("QMQ_BENCH_DELAY_WINDOW_COUNT"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return fmt.Errorf("QMQ_BENCH_DELAY_WINDOW_COUNT=%q: want a positive count", v)
		}
		count = n
	}
	env.logLoad()
	defer env.logLoad()
	rt, rtAddr, err := env.startRealtime(filepath.Join(env.Dir, "realtime"))
	if err != nil {
		return err
	}
	defer rt.stop()
	dl, dlAddr, dlHTTP, err := env.startDelay(filepath.Join(env.Dir, "delay"), "", rtAddr)
	if err != nil {
		return err
	}
	defer dl.stop()
	pid := dl.cmd.Process.Pid
	baseKB, err := settledRSSKB(pid)
	if err != nil {
		return err
	}
	env.Logf("qmq-delay baseline VmRSS %.1f MB", float64(baseKB)/1024)

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
	start := time.Now()
	env.Logf("qmq: storing %d messages, each due %v–%v after its send", count, delayWindowMin, delayWindowMax)
	fill, err := env.fillDelay(rtAddr, dlAddr, delayRun{count: count, min: delayWindowMin, max: delayWindowMax})
	close(stopSampling)
	<-sampled
	if err != nil {
		return err
	}
	env.Logf("qmq: stored %d in %v (%.0f msg/s); peak VmRSS while storing %.0f MB", fill.Messages,
		fill.Elapsed.Round(time.Millisecond), fill.rate(), float64(peak.Load())/1024)
	// The earliest message is due delayWindowMin after the fill started;
	// keep a margin for the wait below and the settling.
	deadline := start.Add(delayWindowMin - time.Minute)
	for {
		inWheel, err := delayGauge(dlHTTP, "qmq_delay_messages_in_wheel")
		if err != nil {
			return err
		}
		if int64(inWheel) == count {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("delay-window: %0.f of %d messages in the wheel when the first could fall due", inWheel, count)
		}
		time.Sleep(500 * time.Millisecond)
	}
	env.Logf("qmq: all %d in the wheel %v after the fill started", count, time.Since(start).Round(time.Millisecond))
	kb, err := settledRSSKB(pid)
	if err != nil {
		return err
	}
	if time.Now().After(start.Add(delayWindowMin)) {
		return fmt.Errorf("delay-window: the measurement ended after the first message could fall due")
	}
	if inWheel, err := delayGauge(dlHTTP, "qmq_delay_messages_in_wheel"); err != nil || int64(inWheel) != count {
		return fmt.Errorf("delay-window: %0.f of %d in the wheel after settling (%v)", inWheel, count, err)
	}
	env.Metric("delay_window_store_msgs_per_s", fill.rate(), "msg/s")
	env.Metric("delay_rss_peak_mb_while_storing_window", float64(peak.Load())/1024, "MB")
	env.Metric("delay_rss_mb_window_baseline", float64(baseKB)/1024, "MB")
	env.Metric("delay_rss_mb_10m_in_window", float64(kb)/1024, "MB")
	env.Metric("delay_window_bytes_per_msg", float64(kb-baseKB)*1024/float64(count), "B")
	return nil
}

// settledRSSKB reads VmRSS of pid once a second and returns it once it
// stops falling, after at least 10 s (at most 30 s): the server's
// background work (replay, GC, the scavenger returning memory) has had
// time to finish.
func settledRSSKB(pid int) (int64, error) {
	var kb int64
	for i := range 30 {
		time.Sleep(time.Second)
		now, err := vmRSSKB(pid)
		if err != nil {
			return 0, err
		}
		if i >= 10 && now >= kb {
			return now, nil
		}
		kb = now
	}
	return kb, nil
}

// delayGauge reads the value of an unlabelled-by-hour gauge from the
// server's /metrics at httpAddr (its constant labels are ignored).
func delayGauge(httpAddr, name string) (float64, error) {
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		j := strings.LastIndexByte(rest, ' ')
		return strconv.ParseFloat(strings.TrimSpace(rest[j+1:]), 64)
	}
	return 0, fmt.Errorf("no %s in http://%s/metrics", name, httpAddr)
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/producer"
)

// The delay-control suite's pending part (issue 32): the timeline query and
// the delay server's memory with many messages pending.
//
//	delay_query_p99_ms   QMQ_BENCH_CONTROL_PENDING messages (default
//	                     10,000,000; 64-byte bodies) pending, due evenly
//	                     over 24 hours starting an hour ahead (beyond the
//	                     wheel's window); 200 pages of 1,000 from one-hour
//	                     windows through the HTTP admin API
//	                     (/schedule/pending): 10 random hours, 20 pages each
//	                     following the cursor; the client's time per page
//	                     (target p99 ≤ 100).
//	delay_rss_mb_10m_pending_1m_cancelled
//	                     qmq-delay's VmRSS once every tenth message (keyed)
//	                     is cancelled by key, QMQ_BENCH_CONTROL_PENDING/10 of
//	                     them (target ≤ 300 at 10 M).

const (
	pendingSubject = "bench.control.pending"
	pendingSpan    = 24 * time.Hour
	pendingPage    = 1000
)

// benchPendingAlone runs the pending part on a qmq-realtime and a qmq-delay
// of its own.
func benchPendingAlone(env *Env) error {
	rt, rtAddr, err := env.startRealtime(filepath.Join(env.Dir, "pending-realtime"))
	if err != nil {
		return err
	}
	defer rt.stop()
	dl, dlAddr, dlHTTP, err := env.startDelay(filepath.Join(env.Dir, "pending-delay"), "", rtAddr)
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
	return benchPending(env, p, dl, dlHTTP)
}

func benchPending(env *Env, p *producer.Producer, dl *process, dlHTTP string) error {
	n := envInt("QMQ_BENCH_CONTROL_PENDING", 10_000_000)
	base := time.Now().Add(time.Hour).Truncate(time.Hour).Add(time.Hour) // the first whole hour an hour or more ahead
	step := float64(pendingSpan) / float64(n)
	due := func(i int) time.Time { return base.Add(time.Duration(float64(i) * step)) }
	body := make([]byte, 64)
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	cb := func(_ *producer.Message, err error) {
		if err != nil && failed.Add(1) == 1 {
			firstErr.Store(err)
		}
		wg.Done()
	}
	for i := 0; i < n; i++ {
		m := &producer.Message{Subject: pendingSubject, Body: body, DeliverAt: due(i)}
		if i%10 == 0 {
			producer.SetScheduleKey(m, "p"+strconv.Itoa(i))
		}
		wg.Add(1)
		if err := p.SendAsync(m, cb); err != nil {
			return err
		}
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("%d of %d sends failed, first: %v", f, n, firstErr.Load())
	}
	env.Logf("delay-control: pending: %d messages (every tenth keyed) stored in %v, due over %v from %s",
		n, time.Since(start).Round(time.Millisecond), pendingSpan, base.UTC().Format(time.RFC3339))
	env.logLoad()
	if rss, err := vmRSSKB(dl.cmd.Process.Pid); err == nil {
		env.Logf("delay-control: pending: qmq-delay VmRSS %d MB with %d pending", rss/1024, n)
	}
	env.logGoMemory(dlHTTP)

	// Cancel every keyed message, 1,000 a request, 8 requests in flight.
	keyed := (n + 9) / 10
	var next atomic.Int64
	var bad atomic.Int64
	var badErr atomic.Value
	start = time.Now()
	var cw sync.WaitGroup
	for w := 0; w < 8; w++ {
		cw.Add(1)
		go func() {
			defer cw.Done()
			targets := make([]producer.CancelTarget, 0, controlCancelBatch)
			for {
				from := int(next.Add(controlCancelBatch)) - controlCancelBatch
				if from >= keyed {
					return
				}
				targets = targets[:0]
				for k := from; k < min(from+controlCancelBatch, keyed); k++ {
					targets = append(targets, producer.CancelTarget{Subject: pendingSubject, Key: "p" + strconv.Itoa(10*k)})
				}
				for j, err := range p.CancelBatch(context.Background(), targets) {
					if err != nil && bad.Add(1) == 1 {
						badErr.Store(err)
					}
					if err != nil && os.Getenv("QMQ_BENCH_DEBUG") != "" {
						fmt.Fprintf(os.Stderr, "# cancel %s (due %s): %v\n", targets[j].Key, due(10*(from+j)).UTC().Format(time.RFC3339), err)
					}
				}
			}
		}()
	}
	cw.Wait()
	if b := bad.Load(); b > 0 {
		return fmt.Errorf("%d of %d cancels of pending messages were not answered cancelled; first: %v", b, keyed, badErr.Load())
	}
	env.Logf("delay-control: pending: %d cancelled in %v", keyed, time.Since(start).Round(time.Millisecond))
	time.Sleep(2 * time.Second) // the replay turns the cancels into dispatch entries
	rss, err := vmRSSKB(dl.cmd.Process.Pid)
	if err != nil {
		return err
	}
	env.Logf("delay-control: pending: qmq-delay VmRSS %d MB with %d pending, %d of them cancelled", rss/1024, n, keyed)
	env.logGoMemory(dlHTTP)
	if dir := os.Getenv("QMQ_BENCH_PROFILE"); dir != "" {
		saveURL(env, "http://"+dlHTTP+"/debug/pprof/heap", filepath.Join(dir, "delay-pending-heap.pprof"))
	}

	// Pages of 1,000 from one-hour windows.
	rng := rand.New(rand.NewPCG(uint64(base.Unix()), 32))
	var times []int64 // microseconds
	listed := 0
	for h := 0; h < 10; h++ {
		from := base.Add(time.Duration(rng.IntN(int(pendingSpan/time.Hour))) * time.Hour)
		cursor := ""
		for pg := 0; pg < 20; pg++ {
			q := url.Values{"subject": {pendingSubject}, "from": {from.UTC().Format(time.RFC3339)},
				"to": {from.Add(time.Hour).UTC().Format(time.RFC3339)}, "limit": {strconv.Itoa(pendingPage)}}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			t0 := time.Now()
			page, err := pendingPageOf("http://" + dlHTTP + "/schedule/pending?" + q.Encode())
			if err != nil {
				return err
			}
			times = append(times, time.Since(t0).Microseconds())
			if len(page.Messages) != pendingPage && page.Next != "" {
				return fmt.Errorf("a page of the hour from %s held %d messages, want %d", from.UTC().Format(time.RFC3339), len(page.Messages), pendingPage)
			}
			listed += len(page.Messages)
			if cursor = page.Next; cursor == "" {
				break
			}
		}
	}
	p50, p99, maxMs := percentilesMs(times)
	env.Logf("delay-control: pending: %d pages (%d messages) of one-hour windows: p50 %.1f ms, p99 %.1f ms, max %.1f ms",
		len(times), listed, p50, p99, maxMs)
	env.Metric("delay_query_p99_ms", p99, "ms")
	env.Metric("delay_rss_mb_10m_pending_1m_cancelled", float64(rss)/1024, "MB")
	return nil
}

// logGoMemory logs the Go heap figures of the server at httpAddr.
func (e *Env) logGoMemory(httpAddr string) {
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var parts []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, name := range []string{"go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes", "go_memstats_sys_bytes"} {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				parts = append(parts, fmt.Sprintf("%s %.0f MB", strings.TrimPrefix(name, "go_memstats_"), f/(1<<20)))
			}
		}
	}
	e.Logf("delay-control: Go memory: %s", strings.Join(parts, ", "))
}

func saveURL(env *Env, u, path string) {
	resp, err := http.Get(u)
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

type pendingPageJSON struct {
	Messages []json.RawMessage `json:"messages"`
	Next     string            `json:"next"`
}

func pendingPageOf(u string) (pendingPageJSON, error) {
	var page pendingPageJSON
	resp, err := http.Get(u)
	if err != nil {
		return page, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return page, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&page)
	return page, err
}

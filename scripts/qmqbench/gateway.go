package main

// The gateway suite: the HTTP gateway (bin/qmq-gateway, --brokers: no meta
// server) in front of one realtime broker (default durable flush: fsync
// before every ack, group commit), driven by keep-alive HTTP/1.1 clients
// (Go net/http, one connection per client goroutine) in a worker process
// on every core. Messages are 256 bytes.
//
//	gateway_publish_msgs_per_s        16 clients, each POST
//	                                  /v1/subjects/bench.gw/publish with
//	                                  Content-Type application/vnd.qmq.mpub:
//	                                  100 bodies separated by newlines, the
//	                                  very bytes the nsqd run below sends to
//	                                  /mpub; one request in flight per
//	                                  client; counts messages answered 200
//	                                  (stored); the clients send Prefer:
//	                                  return=minimal (the gateway answers
//	                                  {"stored":100}, as nsqd answers "OK")
//	gateway_json_publish_msgs_per_s   the same clients, POST /v1/publish with
//	                                  JSON batches of 100 UTF-8 bodies
//	                                  ({"messages":[{"subject":…,"body":…},…]}),
//	                                  Prefer: return=minimal
//	gateway_native_produce_msgs_per_s the produce suite's Go producer (batched
//	                                  async, one core) on the same broker setup
//	gateway_vs_native_produce_ratio   gateway_publish / native (target ≥ 0.3)
//	gateway_nsqd_http_mpub_msgs_per_s the same clients and newline batches
//	                                  against nsqd's HTTP /mpub, nsqd in memory
//	                                  (--mem-queue-size 20,000,000, above
//	                                  what the run sends; the run fails if
//	                                  its /stats show a disk-queue message),
//	                                  with the same Prefer header (nsqd
//	                                  ignores it)
//	gateway_vs_nsqd_http_pub_ratio    gateway_publish / nsqd: the same body
//	                                  format on both sides (target ≥ 1.0).
//	                                  Not the same work: the gateway answers
//	                                  once the broker has stored every
//	                                  message durably (fsync), nsqd once
//	                                  they are in its memory
//	gateway_json_vs_nsqd_http_pub_ratio gateway_json_publish / nsqd
//
// The three publish figures are measured in the same window, after 3 s
// of each not counted (gatewayWarmUp: qmq-realtime's processor governor
// settles in the first seconds of load; nsqd warm, as in the produce suite:
// 10 s, then its topic emptied, so that its heap holds a backlog and the
// window does not measure it faulting in fresh pages), 4 s at a time in the order
// newline, JSON, nsqd, nsqd, JSON, newline (8 s each in all), with the
// broker, the gateway and nsqd all running throughout, so that the ratios
// compare the two sides at the same moments of the shared machine's load.
//	gateway_consume_msgs_per_s        300,000 messages published first
//	                                  through the gateway (text bodies); 8
//	                                  clients, each its own consumer id in
//	                                  one group, pull max=100 (wait 1s) and
//	                                  hand each pull's 100 ids to an ack
//	                                  goroutine of their own (one ack
//	                                  request per pull, on its own
//	                                  connection) (target ≥ 100,000)
//	gateway_e2e_p50_ms, _p99_ms       5,000 msg/s, one message per publish
//	                                  request from 4 clients on an absolute
//	                                  schedule; 2 long-polling consumers
//	                                  (max=100, wait=5s) ack each pull from
//	                                  a goroutine; latency = pull answer
//	                                  decoded − publish request started (the
//	                                  body carries it); the first second is
//	                                  dropped (target p99 ≤ 10 ms)

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gojson "github.com/goccy/go-json"
)

const (
	gatewayDuration = 8 * time.Second
	gatewayWarmUp   = 3 * time.Second // each publish side, before its slices
	// gatewayNSQDWarmUp is nsqd's warm-up: longer than its slices, so that
	// its heap holds what they send (at the same rate or below).
	gatewayNSQDWarmUp   = gatewayDuration + 2*time.Second
	gatewayBatch        = 100
	gatewayPublishConns = 16
	gatewayConsumeTotal = 300000
	gatewayConsumeConns = 8
	gatewayE2ERate      = 5000
	// gatewayNSQTopic is the topic the nsqd side publishes to.
	gatewayNSQTopic = "bench_gw"
)

func init() {
	register("gateway", runGateway)
	registerWorker("gateway-publish", gatewayPublishWorker)
	registerWorker("gateway-consume", gatewayConsumeWorker)
	registerWorker("gateway-e2e", gatewayE2EWorker)
}

// startGateway runs bin/qmq-gateway in front of broker and waits until it
// is ready; it returns the process and its base URL.
func (e *Env) startGateway(broker string) (*process, string, error) {
	addr := freeAddr()
	p, err := startProcess("qmq-gateway", filepath.Join(e.Bin, "qmq-gateway"),
		"--addr", addr, "--brokers", broker, "--log-level", "warn")
	if err != nil {
		return nil, "", err
	}
	url := "http://" + addr
	if err := p.waitHTTP(url+"/readyz", 60*time.Second); err != nil {
		p.kill()
		return nil, "", err
	}
	return p, url, nil
}

func runGateway(env *Env) error {
	// Publish: newline batches to the gateway and to nsqd, JSON batches to
	// the gateway (gatewayPublish).
	pub, pubJSON, nsq, err := env.gatewayPublish()
	if err != nil {
		return err
	}
	env.Metric("gateway_publish_msgs_per_s", pub, "msg/s")
	env.Metric("gateway_json_publish_msgs_per_s", pubJSON, "msg/s")
	native, err := env.produceOurs(filepath.Join(env.Dir, "native"), gatewayDuration)
	if err != nil {
		return err
	}
	env.Metric("gateway_native_produce_msgs_per_s", native, "msg/s")
	env.Metric("gateway_vs_native_produce_ratio", pub/native, "x")
	env.Metric("gateway_nsqd_http_mpub_msgs_per_s", nsq, "msg/s")
	env.Metric("gateway_vs_nsqd_http_pub_ratio", pub/nsq, "x")
	env.Metric("gateway_json_vs_nsqd_http_pub_ratio", pubJSON/nsq, "x")

	// Consume.
	cons, err := env.gatewayRun(filepath.Join(env.Dir, "consume"), func(url, broker string) (float64, error) {
		var fill rateResult
		if err := runWorkerProcs("gateway-publish", 0, &fill, "-url", url, "-subject", "bench.gwc",
			"-count", strconv.Itoa(gatewayConsumeTotal)); err != nil {
			return 0, err
		}
		var res rateResult
		err := runWorkerProcs("gateway-consume", 0, &res, "-url", url, "-subject", "bench.gwc",
			"-total", strconv.Itoa(gatewayConsumeTotal))
		env.Logf("gateway consume: %d messages in %v", res.Messages, res.Elapsed)
		if err == nil && res.Messages < gatewayConsumeTotal {
			err = fmt.Errorf("consumed %d of %d messages", res.Messages, gatewayConsumeTotal)
		}
		return res.rate(), err
	})
	if err != nil {
		return err
	}
	env.Metric("gateway_consume_msgs_per_s", cons, "msg/s")

	// End to end.
	var lat gatewayLatency
	if _, err := env.gatewayRun(filepath.Join(env.Dir, "e2e"), func(url, _ string) (float64, error) {
		return 0, runWorkerProcs("gateway-e2e", 0, &lat, "-url", url)
	}); err != nil {
		return err
	}
	env.Logf("gateway e2e: %d messages measured", lat.Count)
	env.Metric("gateway_e2e_p50_ms", lat.P50, "ms")
	env.Metric("gateway_e2e_p99_ms", lat.P99, "ms")
	return nil
}

// gatewayLatency is what the e2e worker reports.
type gatewayLatency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
}

// gatewayRun starts a broker with data in dir and a gateway in front of
// it, runs fn with the gateway's URL and the broker's address, and stops
// both.
func (e *Env) gatewayRun(dir string, fn func(url, broker string) (float64, error)) (float64, error) {
	b, broker, err := e.startRealtime(dir)
	if err != nil {
		return 0, err
	}
	defer b.stop()
	g, url, err := e.startGateway(broker)
	if err != nil {
		return 0, err
	}
	defer g.stop()
	return fn(url, broker)
}

// gatewayPublish measures publish through the gateway (newline batches,
// then JSON) and through nsqd's /mpub (the same newline batches), each for
// gatewayDuration in two halves, in the order lines, JSON, nsqd, nsqd,
// JSON, lines, with the broker, the gateway and nsqd all up throughout: the
// shared machine's load drifts by 2× within a suite, and a ratio of runs
// made at different moments measured that drift more than the two sides.
// It returns the three rates (messages over the time of their halves).
func (e *Env) gatewayPublish() (lines, jsonRate, nsq float64, err error) {
	b, broker, err := e.startRealtime(filepath.Join(e.Dir, "pub"))
	if err != nil {
		return 0, 0, 0, err
	}
	defer b.stop()
	g, url, err := e.startGateway(broker)
	if err != nil {
		return 0, 0, 0, err
	}
	defer g.stop()
	p, _, httpAddr, err := e.startNSQD(filepath.Join(e.Dir, "nsq"))
	if err != nil {
		return 0, 0, 0, err
	}
	defer p.stop()
	sides := []struct {
		name, url, mode string
		total           rateResult
	}{
		{"gateway, newline batches", url, "gateway-lines", rateResult{}},
		{"gateway, JSON batches", url, "gateway", rateResult{}},
		{"nsqd /mpub", "http://" + httpAddr, "nsqd", rateResult{}},
	}
	// gatewayWarmUp of each first, not counted: the first slice of a
	// fresh process ran 20–30 % below the second (new segment files,
	// nsqd's queues and buffers growing, connections). nsqd's first,
	// lines' last. With a second each, the first lines slice still ran
	// 10–25 % below the last: qmq-realtime starts on one processor and
	// its governor (pkg/procs) switched to two 2–4 s into the load, inside
	// that slice (consumer/gateway/NOTES.md, "gw3").
	// nsqd warms up longer, and its topic is emptied after it: warm, as in
	// the produce suite (produceNSQWarm), its Go heap already holds about
	// what the window will send it, so it does not fault in fresh pages
	// for every message it keeps.
	for _, k := range []int{2, 1, 0} {
		sd := sides[k]
		warm := gatewayWarmUp
		if k == 2 {
			warm = gatewayNSQDWarmUp
		}
		var res rateResult
		if err := runWorkerProcs("gateway-publish", 0, &res, "-url", sd.url, "-mode", sd.mode, "-minimal",
			"-duration", warm.String()); err != nil {
			return 0, 0, 0, fmt.Errorf("publish (%s), warming up: %w", sd.name, err)
		}
		if k == 2 {
			if _, err := nsqMemoryOnly(httpAddr); err != nil {
				return 0, 0, 0, err
			}
			if err := nsqEmptyTopic(httpAddr, gatewayNSQTopic); err != nil {
				return 0, 0, 0, err
			}
			e.Logf("nsqd /mpub, warming up: %d messages in %v, then its topic emptied", res.Messages, res.Elapsed)
		}
	}
	nsqdPid := p.cmd.Process.Pid
	faults := processFaults(nsqdPid)
	for _, k := range []int{0, 1, 2, 2, 1, 0} {
		sd := &sides[k]
		var res rateResult
		err := runWorkerProcs("gateway-publish", 0, &res, "-url", sd.url, "-mode", sd.mode, "-minimal",
			"-duration", (gatewayDuration / 2).String())
		if err == nil && res.Failed > 0 {
			err = fmt.Errorf("%d requests failed", res.Failed)
		}
		if err != nil {
			return 0, 0, 0, fmt.Errorf("publish (%s): %w", sd.name, err)
		}
		e.Logf("publish (%s): %d messages in %v", sd.name, res.Messages, res.Elapsed)
		sd.total.Messages += res.Messages
		sd.total.Elapsed += res.Elapsed
	}
	took, spill := nsqMemoryOnly(httpAddr)
	if spill != nil {
		return 0, 0, 0, spill
	}
	e.Logf("nsqd /mpub: in memory (nsqd took %d in all, %d page faults during the window)", took, processFaults(nsqdPid)-faults)
	return sides[0].total.rate(), sides[1].total.rate(), sides[2].total.rate(), nil
}

// httpClient keeps conns keep-alive connections to one host.
func httpClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns,
		IdleConnTimeout: time.Minute, DisableCompression: true,
	}, Timeout: 30 * time.Second}
}

// post sends body and returns the status and answer.
func post(c *http.Client, url, ctype string, body []byte) (int, []byte, error) {
	resp, err := c.Post(url, ctype, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, data, err
}

// postPrefer is post, with Prefer: return=minimal when minimal.
func postPrefer(c *http.Client, url, ctype string, body []byte, minimal bool) (int, []byte, error) {
	if !minimal {
		return post(c, url, ctype, body)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Prefer", "return=minimal")
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, data, err
}

func gatewayPublishWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("gateway-publish", flag.ContinueOnError)
	url := fs.String("url", "", "gateway or nsqd base URL")
	mode := fs.String("mode", "gateway", "gateway (JSON to POST /v1/publish), gateway-lines (newline batches to POST /v1/subjects/SUBJECT/publish) or nsqd (newline batches to POST /mpub)")
	conns := fs.Int("conns", gatewayPublishConns, "clients, one keep-alive connection each")
	batch := fs.Int("batch", gatewayBatch, "messages per request")
	d := fs.Duration("duration", gatewayDuration, "how long to publish")
	subject := fs.String("subject", "bench.gw", "subject")
	count := fs.Int64("count", 0, "publish this many messages (a multiple of -batch) instead of for -duration")
	minimal := fs.Bool("minimal", false, "ask for a minimal answer (Prefer: return=minimal)")
	cpuProfile := fs.String("cpuprofile", "", "write the worker's CPU profile to this file (hand runs)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	body := strings.Repeat("x", messageSize)
	var payload []byte
	var target, ctype string
	switch *mode {
	case "gateway":
		var b strings.Builder
		b.WriteString(`{"messages":[`)
		for i := range *batch {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"subject":"` + *subject + `","body":"` + body + `"}`)
		}
		b.WriteString(`]}`)
		payload, target, ctype = []byte(b.String()), *url+"/v1/publish", "application/json"
	case "gateway-lines":
		// The same bytes as nsqd's below, in the gateway's batch media type.
		payload = []byte(strings.TrimSuffix(strings.Repeat(body+"\n", *batch), "\n"))
		target, ctype = *url+"/v1/subjects/"+*subject+"/publish", "application/vnd.qmq.mpub"
	case "nsqd":
		payload = []byte(strings.TrimSuffix(strings.Repeat(body+"\n", *batch), "\n"))
		target, ctype = *url+"/mpub?topic="+gatewayNSQTopic, "application/octet-stream"
	default:
		return nil, fmt.Errorf("mode %q", *mode)
	}
	c := httpClient(*conns)
	var ok, failed, sent atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	deadline := start.Add(*d)
	var wg sync.WaitGroup
	for range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if *count > 0 {
					if sent.Add(int64(*batch)) > *count {
						break
					}
				} else if !time.Now().Before(deadline) {
					break
				}
				code, data, err := postPrefer(c, target, ctype, payload, *minimal)
				if err != nil || code != http.StatusOK {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%d %v %.200s", code, err, data))
					continue
				}
				ok.Add(int64(*batch))
			}
		}()
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return nil, fmt.Errorf("%d requests failed, first: %s", failed.Load(), e)
	}
	return rateResult{Messages: ok.Load(), Failed: failed.Load(), Elapsed: time.Since(start)}, nil
}

// pulled is the part of a pull answer the workers read.
type pulled struct {
	Messages []struct {
		ID   string `json:"id"`
		Body string `json:"body"`
	} `json:"messages"`
}

// pullAck pulls once as consumer and returns the answer.
func pullOnce(c *http.Client, base, subject, consumerID string, max int, wait time.Duration) (*pulled, error) {
	resp, err := c.Get(fmt.Sprintf("%s/v1/subjects/%s/groups/bench/messages?consumer=%s&max=%d&wait=%s&start=earliest",
		base, subject, consumerID, max, wait))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("pull answered %d: %.200s", resp.StatusCode, data)
	}
	// The answers are read whole and decoded with goccy/go-json: with
	// encoding/json's reflection the consume worker used more CPU than the
	// gateway it measured (3.5 s of a 6.5 s run on the shared 2 cores).
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var p pulled
	if err := gojson.Unmarshal(data, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// ackAll acks the messages of p as consumerID in one request.
func ackAll(c *http.Client, base, subject, consumerID string, p *pulled) error {
	var b bytes.Buffer
	b.WriteString(`{"consumer":"` + consumerID + `","ids":[`)
	for i, m := range p.Messages {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + m.ID + `"`)
	}
	b.WriteString(`]}`)
	code, data, err := post(c, base+"/v1/subjects/"+subject+"/groups/bench/ack", "application/json", b.Bytes())
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("ack answered %d: %.200s", code, data)
	}
	return err
}

func gatewayConsumeWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("gateway-consume", flag.ContinueOnError)
	url := fs.String("url", "", "gateway base URL")
	subject := fs.String("subject", "", "subject")
	total := fs.Int64("total", gatewayConsumeTotal, "messages to consume")
	conns := fs.Int("conns", gatewayConsumeConns, "consumers, one keep-alive connection each")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c := httpClient(2 * *conns)
	var got, pulls atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	defer func() {
		fmt.Fprintf(os.Stderr, "# gateway-consume: %d messages in %d pulls\n", got.Load(), pulls.Load())
	}()
	for i := range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("bench-c%d", i)
			// Acks go from a goroutine of their own, so the next pull
			// does not wait for the last one's ack.
			acks := make(chan *pulled, 4)
			acked := make(chan struct{})
			go func() {
				defer close(acked)
				for p := range acks {
					if err := ackAll(c, *url, *subject, id, p); err != nil {
						firstErr.CompareAndSwap(nil, err.Error())
					}
					got.Add(int64(len(p.Messages)))
				}
			}()
			defer func() { close(acks); <-acked }()
			idle := time.Now()
			for got.Load() < *total && time.Since(idle) < 5*time.Second && firstErr.Load() == nil {
				p, err := pullOnce(c, *url, *subject, id, gatewayBatch, time.Second)
				pulls.Add(1)
				if err != nil {
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				if len(p.Messages) > 0 {
					idle = time.Now()
					acks <- p
				}
			}
		}()
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return nil, fmt.Errorf("consume: %s", e)
	}
	return rateResult{Messages: got.Load(), Elapsed: time.Since(start)}, nil
}

func gatewayE2EWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("gateway-e2e", flag.ContinueOnError)
	url := fs.String("url", "", "gateway base URL")
	rate := fs.Int("rate", gatewayE2ERate, "messages per second")
	d := fs.Duration("duration", 6*time.Second, "how long to publish")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	const subject, publishers, consumers = "bench.gwe", 4, 2
	c := httpClient(publishers + 2*consumers)
	// Open the consumers' sessions before the first message.
	for i := range consumers {
		if _, err := pullOnce(c, *url, subject, fmt.Sprintf("e2e-c%d", i), 1, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	warm := start.Add(time.Second)
	end := start.Add(*d)
	var mu sync.Mutex
	var lat []float64
	var received atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var cwg sync.WaitGroup
	for i := range consumers {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			id := fmt.Sprintf("e2e-c%d", i)
			acks := make(chan *pulled, 64)
			var awg sync.WaitGroup
			awg.Add(1)
			go func() {
				defer awg.Done()
				for p := range acks {
					if err := ackAll(c, *url, subject, id, p); err != nil {
						firstErr.CompareAndSwap(nil, err.Error())
					}
				}
			}()
			defer func() { close(acks); awg.Wait() }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, err := pullOnce(c, *url, subject, id, 100, time.Second)
				if err != nil {
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				now := time.Now()
				mine := make([]float64, 0, len(p.Messages))
				for _, m := range p.Messages {
					ns, err := strconv.ParseInt(strings.TrimRight(m.Body, "x"), 10, 64)
					if err != nil {
						continue
					}
					if sent := time.Unix(0, ns); sent.After(warm) {
						mine = append(mine, float64(now.Sub(sent).Microseconds())/1000)
					}
				}
				received.Add(int64(len(p.Messages)))
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
				if len(p.Messages) > 0 {
					acks <- p
				}
			}
		}()
	}
	var sent atomic.Int64
	var pwg sync.WaitGroup
	interval := time.Second * time.Duration(publishers) / time.Duration(*rate)
	for i := range publishers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			next := start.Add(time.Duration(i) * interval / publishers)
			for next.Before(end) {
				if w := time.Until(next); w > 0 {
					time.Sleep(w)
				}
				next = next.Add(interval)
				now := time.Now()
				body := strconv.FormatInt(now.UnixNano(), 10)
				body += strings.Repeat("x", messageSize-len(body))
				req := `{"messages":[{"subject":"` + subject + `","body":"` + body + `"}]}`
				code, data, err := post(c, *url+"/v1/publish", "application/json", []byte(req))
				if err != nil || code != http.StatusOK {
					firstErr.CompareAndSwap(nil, fmt.Sprintf("publish: %d %v %.200s", code, err, data))
					return
				}
				sent.Add(1)
			}
		}()
	}
	pwg.Wait()
	drain := time.Now().Add(10 * time.Second)
	for received.Load() < sent.Load() && time.Now().Before(drain) {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	cwg.Wait()
	if e := firstErr.Load(); e != nil {
		return nil, fmt.Errorf("e2e: %s", e)
	}
	if received.Load() < sent.Load() {
		return nil, fmt.Errorf("received %d of %d messages", received.Load(), sent.Load())
	}
	sort.Float64s(lat)
	if len(lat) == 0 {
		return nil, fmt.Errorf("no latency measured")
	}
	pct := func(q float64) float64 { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	return gatewayLatency{Count: len(lat), P50: pct(0.50), P99: pct(0.99)}, nil
}

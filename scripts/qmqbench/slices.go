package main

// Interleaved slices: comparing produce runs of two or three setups that
// differ by a few per cent on a host whose speed does not hold still.
//
// On the 2-core bench machines the same broker and producer, run after
// run, made 456 k to 691 k msg/s with the same CPU-seconds (the CPU time a
// message costs itself moved by half from one 8 s run to the next, with no
// steal showing); separate runs a side, even the best of five, then
// compare the host's moments more than the setups. So every setup gets a
// broker of its own, all started at once on fresh data directories (each
// keeping at most sliceRetentionBytes of message log), and
// one producer process (GOMAXPROCS=1, as the produce suite's) holds a
// producer per setup and sends to one setup at a time in slices of
// sliceLength: it sends for the slice, then waits until every message it
// sent is answered (the drain, counted in the slice's time), and moves to
// the next setup. The slices run in rounds of one slice a setup. Two
// setups alternate (A B A B …: each waits one slice, and each follows the
// other); with three, a round's order is the previous one's reversed, then
// rotated by one every second round (all six orders in turn), so that
// neither a drift of the host's speed within a round nor what a setup
// leaves behind for the next slice falls on one setup more than another.
// A setup's rate is the messages answered in its slices over the time of
// its slices. Slices of one setup still differ by ±15 % from round to
// round (10th to 90th percentile; 1 s slices alike), so two setups running
// the same code (three brokers, one producer each) come out within about
// ±3 % of each other with 40 s a side. Before the measured slices each
// producer sends for sliceWarmUp (connections made, first segments
// created).
//
// A slice and its drain (about 0.1 s: the producer's queue of 50,000
// messages and its 16 requests in flight) are shorter than anything a
// broker defers to an idle moment (the message index writes what it holds
// after an idle second), so with two setups a setup's background work is
// done in its own slices, not in the other's.

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/qmq-go/qmq/producer"
)

const (
	sliceLength  = 400 * time.Millisecond
	slicePerSide = 40 * time.Second // the worker's default measured time a setup gets
	sliceWarmUp  = time.Second
	// sliceRetentionBytes bounds each broker's message log (--retention-bytes,
	// every setup alike): three brokers taking 400 k msg/s for 120 s of
	// slices each wrote 15 GB apiece and filled the bench machine's disk.
	sliceRetentionBytes = 4 << 30
)

func init() {
	registerWorker("produce-slices", produceSlicesWorker)
}

// slicesResult is what the produce-slices worker reports: per setup, the
// messages answered and the seconds of its slices, and each round's rate.
type slicesResult struct {
	Messages []int64     `json:"messages"`
	Seconds  []float64   `json:"seconds"`
	Failed   int64       `json:"failed"`
	Rounds   [][]float64 `json:"rounds"` // msg/s per setup, a round each
}

func (r slicesResult) rate(side int) float64 {
	if r.Seconds[side] <= 0 {
		return 0
	}
	return float64(r.Messages[side]) / r.Seconds[side]
}

// roundRatios returns each round's rate of setup b over setup a, sorted.
func (r slicesResult) roundRatios(a, b int) []float64 {
	var out []float64
	for _, rates := range r.Rounds {
		if rates[a] > 0 {
			out = append(out, rates[b]/rates[a])
		}
	}
	sort.Float64s(out)
	return out
}

// sliceOrder returns the order of the setups in round r of n setups.
func sliceOrder(r, n int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = (r/2 + i) % n
	}
	if n == 2 {
		return []int{0, 1}
	}
	if r%2 == 1 {
		for i, j := 0, n-1; i < j; i, j = i+1, j-1 {
			order[i], order[j] = order[j], order[i]
		}
	}
	return order
}

// produceSlicesWorker sends 256-byte messages to one subject in
// interleaved slices, one producer per -addrs entry (batches of 256, 16
// in flight: the produce suite's), traced as the matching -otel entry says
// (none, off: a nil tracer provider, on: 1 % sampled; default none).
func produceSlicesWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("produce-slices", flag.ContinueOnError)
	addrs := fs.String("addrs", "", "broker addresses, one per setup (comma-separated)")
	modes := fs.String("otel", "", "tracing per setup (comma-separated: none, off, on; default none)")
	perSide := fs.Duration("per-side", slicePerSide, "measured time per setup")
	length := fs.Duration("slice", sliceLength, "slice length")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	brokers := strings.Split(*addrs, ",")
	n := len(brokers)
	tracing := make([]string, n)
	if *modes != "" {
		m := strings.Split(*modes, ",")
		if len(m) != n {
			return nil, fmt.Errorf("%d -otel modes for %d brokers", len(m), n)
		}
		copy(tracing, m)
	}
	type side struct {
		p                *producer.Producer
		sent, ok, failed atomic.Int64
		cb               func(*producer.Message, error)
		shutdown         func()
	}
	sides := make([]*side, n)
	for i := range sides {
		s := &side{}
		opts, shutdown, err := traceProducerOptions(brokers[i], tracing[i])
		if err != nil {
			return nil, err
		}
		s.shutdown = shutdown
		if s.p, err = producer.New(opts...); err != nil {
			return nil, err
		}
		s.cb = func(_ *producer.Message, err error) {
			if err != nil {
				s.failed.Add(1)
			} else {
				s.ok.Add(1)
			}
		}
		sides[i] = s
	}
	body := make([]byte, messageSize)
	// slice sends to s until end, then waits for every answer.
	slice := func(s *side, end time.Time) error {
		for i := 0; ; i++ {
			if i&255 == 0 && time.Now().After(end) {
				break
			}
			if err := s.p.SendAsync(&producer.Message{Subject: "bench.s0", Body: body}, s.cb); err != nil {
				return err
			}
			s.sent.Add(1)
		}
		for s.ok.Load()+s.failed.Load() < s.sent.Load() {
			time.Sleep(50 * time.Microsecond)
		}
		return nil
	}
	for _, s := range sides {
		if err := slice(s, time.Now().Add(sliceWarmUp)); err != nil {
			return nil, err
		}
	}
	res := slicesResult{Messages: make([]int64, n), Seconds: make([]float64, n)}
	rounds := max(1, int(*perSide / *length))
	for r := range rounds {
		rates := make([]float64, n)
		for _, i := range sliceOrder(r, n) {
			s := sides[i]
			before, start := s.ok.Load(), time.Now()
			if err := slice(s, start.Add(*length)); err != nil {
				return nil, err
			}
			took, got := time.Since(start).Seconds(), s.ok.Load()-before
			res.Messages[i] += got
			res.Seconds[i] += took
			rates[i] = float64(got) / took
		}
		res.Rounds = append(res.Rounds, rates)
	}
	for _, s := range sides {
		res.Failed += s.failed.Load()
		if err := s.p.Close(context.Background()); err != nil {
			return nil, err
		}
		s.shutdown()
	}
	return res, nil
}

// traceProducerOptions returns the produce suite's producer options for
// addr with tracing as mode says (none, off or on), and what to call once
// the producer is closed.
func traceProducerOptions(addr, mode string) ([]producer.Option, func(), error) {
	opts := []producer.Option{producer.WithBrokers(addr), producer.WithQueueSize(50000), producer.WithMaxInFlight(16),
		producer.WithBatch(256, 1<<20)}
	switch mode {
	case "", "none":
		return opts, func() {}, nil
	case "off":
		return append(opts, producer.WithTracerProvider(nil)), func() {}, nil
	case "on":
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))),
			sdktrace.WithBatcher(discardSpans{}))
		return append(opts, producer.WithTracerProvider(tp)), func() { tp.Shutdown(context.Background()) }, nil
	}
	return nil, nil, fmt.Errorf("unknown tracing mode %q", mode)
}

// sliceSetup is one side of an interleaved comparison: its broker's extra
// flags and environment, and its producer's tracing.
type sliceSetup struct {
	name       string
	brokerArgs []string
	brokerEnv  []string // KEY=VALUE, set while its broker starts
	otel       string
}

// produceSlices starts a broker per setup on fresh data directories, runs
// the produce-slices worker against them (perSide of slices a setup), stops them, removes their data
// and waits for the disks to go quiet.
func (e *Env) produceSlices(perSide time.Duration, setups []sliceSetup) (slicesResult, error) {
	var res slicesResult
	e.settleRound()
	addrs, modes := make([]string, len(setups)), make([]string, len(setups))
	for i, st := range setups {
		dir := filepath.Join(e.Dir, st.name)
		defer e.dropRun(dir)
		for _, kv := range st.brokerEnv {
			k, v, _ := strings.Cut(kv, "=")
			os.Setenv(k, v)
		}
		args := append([]string{"--retention-bytes", fmt.Sprint(sliceRetentionBytes)}, st.brokerArgs...)
		b, addr, err := e.startRealtime(dir, args...)
		for _, kv := range st.brokerEnv {
			k, _, _ := strings.Cut(kv, "=")
			os.Unsetenv(k)
		}
		if err != nil {
			return res, err
		}
		defer b.stop()
		addrs[i], modes[i] = addr, cmp.Or(st.otel, "none")
	}
	if err := runWorker("produce-slices", &res, "-addrs", strings.Join(addrs, ","), "-otel", strings.Join(modes, ","),
		"-per-side", perSide.String()); err != nil {
		return res, err
	}
	if res.Failed > 0 {
		return res, fmt.Errorf("%d sends failed", res.Failed)
	}
	for i, st := range setups {
		e.Logf("%s: %d messages in %.1f s of slices", st.name, res.Messages[i], res.Seconds[i])
	}
	return res, nil
}

// spread formats sorted ratios as their minimum, median and maximum.
func spread(sorted []float64) string {
	if len(sorted) == 0 {
		return "none"
	}
	return fmt.Sprintf("min %.3f, median %.3f, max %.3f over %d rounds", sorted[0], sorted[len(sorted)/2], sorted[len(sorted)-1], len(sorted))
}

package main

// The fairness suite: a group of 2 consumers drains a backlog alone and
// beside a group of 64 consumers of the same subject flooding the broker
// with pulls (each group in its own process, on one core each). The machine
// is shared and its load swings by more than the effect over tens of
// seconds, so the two are measured in alternating phases of a few seconds:
// one flood process runs throughout and is paused (SIGSTOP: its consumers
// stay connected but send nothing, so the broker serves the small group
// alone) and resumed in turn. Each cycle runs a fresh small group (its own
// process, reading the backlog from its start) for one phase alone and one
// beside the flood, in alternating order; each phase's first 750 ms are not
// counted (the flood resuming, or the broker's last answers to it
// draining).
//
//	fairness_small_alone_msgs_per_s, fairness_small_flooded_msgs_per_s
//	                                the means over the cycles
//	fairness_small_group_ratio      flooded / alone (target ≥ 0.5)
//
// A comment line gives the CPU (in cores) the broker, the flood and the
// small group used over the counted spans of each kind of phase, and the
// small group's CPU per message: the ratio follows that split (realtime
// doc.go, "Fair share").
//
// QMQ_BENCH_FAIRNESS_BROKER_FLAGS adds flags to the broker's command line
// (space-separated, for experiments such as --fair-share-hold=0).

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/qmq-go/qmq/consumer"
)

const (
	fairnessBacklog = 14_000_000              // the flood must not run dry: it reads up to ~500k msg/s for 18 s
	fairnessCycles  = 6                       // each: a small group alone and beside the flood
	fairnessPhase   = 2500 * time.Millisecond // one phase
	fairnessSettle  = 750 * time.Millisecond  // not counted at the start of a phase
	fairnessStep    = 50 * time.Millisecond   // the small group's count is sampled this often
)

func init() {
	register("fairness", runFairness)
	registerWorker("group", groupWorker)
}

func runFairness(env *Env) error {
	b, addr, err := env.startRealtime(filepath.Join(env.Dir, "qmq"), strings.Fields(os.Getenv("QMQ_BENCH_FAIRNESS_BROKER_FLAGS"))...)
	if err != nil {
		return err
	}
	defer b.stop()
	var fill rateResult
	if err := runWorker("produce", &fill, "-addr", addr, "-count", fmt.Sprint(fairnessBacklog), "-subject", "bench.fair"); err != nil {
		return err
	}
	flood, err := startGroupWorker(addr, "big", 64, time.Hour, 0)
	if err != nil {
		return err
	}
	defer flood.kill()
	if err := flood.waitCounting(); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond) // the flood is under way
	pause := func(paused bool) error {
		sig := syscall.SIGCONT
		if paused {
			sig = syscall.SIGSTOP
		}
		if err := flood.cmd.Process.Signal(sig); err != nil {
			return fmt.Errorf("signal the flood: %w", err)
		}
		return nil
	}
	var alone, flooded float64
	// CPU of the broker, the flood and the small group over the counted
	// spans, alone (k=0) and beside the flood (k=1), and the small group's
	// messages in them.
	phaseCPU := [2]*cpuAccount{newCPUAccount(0, 0, 0), newCPUAccount(0, 0, 0)}
	var smallMsgs [2]float64
	for cycle := 0; cycle < fairnessCycles; cycle++ {
		if err := pause(true); err != nil {
			return err
		}
		small, err := startGroupWorker(addr, fmt.Sprint("small", cycle), 2, 2*fairnessPhase+time.Second, fairnessStep)
		if err != nil {
			return err
		}
		if err := small.waitCounting(); err != nil {
			small.kill()
			return err
		}
		var rates [2]float64 // alone, flooded
		var spans [2][2]time.Time
		procs := newCPUAccount(b.cmd.Process.Pid, flood.cmd.Process.Pid, small.cmd.Process.Pid)
		for _, withFlood := range [2]bool{cycle%2 == 1, cycle%2 == 0} {
			if err := pause(!withFlood); err != nil {
				small.kill()
				return err
			}
			start := time.Now()
			time.Sleep(fairnessSettle)
			from, cpu0 := time.Now(), procs.sample()
			time.Sleep(time.Until(start.Add(fairnessPhase)))
			to, cpu1 := time.Now(), procs.sample()
			k := 0
			if withFlood {
				k = 1
			}
			spans[k] = [2]time.Time{from, to}
			phaseCPU[k].add(cpu0, cpu1, to.Sub(from))
		}
		var series seriesResult
		if err := small.result(&series); err != nil {
			return err
		}
		for k := range rates {
			if rates[k], err = series.rate(spans[k][0], spans[k][1]); err != nil {
				return err
			}
		}
		env.Logf("cycle %d: small group alone %.0f msg/s, beside the flood %.0f msg/s (%.2f)", cycle, rates[0], rates[1], rates[1]/rates[0])
		alone += rates[0] / fairnessCycles
		flooded += rates[1] / fairnessCycles
		for k := range rates {
			smallMsgs[k] += rates[k] * spans[k][1].Sub(spans[k][0]).Seconds()
		}
	}
	perMsg := func(k int) float64 { return phaseCPU[k].used[2].Seconds() * 1e6 / max(smallMsgs[k], 1) }
	env.Logf("CPU (cores) alone: broker %.2f, small group %.2f (%.2f µs/msg); beside the flood: broker %.2f, flood %.2f, small group %.2f (%.2f µs/msg)",
		phaseCPU[0].cores(0), phaseCPU[0].cores(2), perMsg(0), phaseCPU[1].cores(0), phaseCPU[1].cores(1), phaseCPU[1].cores(2), perMsg(1))
	env.Metric("fairness_small_alone_msgs_per_s", alone, "msg/s")
	env.Metric("fairness_small_flooded_msgs_per_s", flooded, "msg/s")
	env.Metric("fairness_small_group_ratio", flooded/alone, "x")
	return nil
}

// groupProcess is a group worker running in the background.
type groupProcess struct {
	cmd      *exec.Cmd
	out      lockedBuffer  // stdout and stderr
	counting chan struct{} // closed when the worker prints "counting"
	done     chan error
}

// startGroupWorker starts a group worker of n consumers on one core.
func startGroupWorker(addr, group string, n int, d, step time.Duration) (*groupProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	g := &groupProcess{counting: make(chan struct{}), done: make(chan error, 1)}
	g.cmd = exec.Command(self, "worker", "group", "-addr", addr, "-group", group, "-consumers", fmt.Sprint(n),
		"-duration", d.String(), "-step", step.String())
	g.cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	g.cmd.Stderr = &g.out
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := g.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start group worker %s: %w", group, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if sc.Text() == "counting" {
				close(g.counting)
			}
			g.out.Write(append(sc.Bytes(), '\n'))
		}
		g.done <- g.cmd.Wait()
	}()
	return g, nil
}

// waitCounting waits until the worker counts (its consumers subscribed and
// warmed up).
func (g *groupProcess) waitCounting() error {
	select {
	case <-g.counting:
		return nil
	case err := <-g.done:
		g.done <- err
		return fmt.Errorf("group worker ended before counting (%v): %s", err, tail(g.out.String()))
	case <-time.After(time.Minute):
		return fmt.Errorf("group worker not counting after a minute: %s", tail(g.out.String()))
	}
}

// result waits for the worker and decodes its result into out.
func (g *groupProcess) result(out any) error {
	if err := <-g.done; err != nil {
		g.done <- err
		return fmt.Errorf("group worker: %w: %s", err, tail(g.out.String()))
	}
	g.done <- nil
	for _, line := range strings.Split(g.out.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "result "); ok {
			return json.Unmarshal([]byte(rest), out)
		}
	}
	return fmt.Errorf("group worker printed no result: %s", tail(g.out.String()))
}

// kill ends the worker if it still runs (a paused one is resumed first).
func (g *groupProcess) kill() {
	select {
	case err := <-g.done:
		g.done <- err
		return
	default:
	}
	g.cmd.Process.Signal(syscall.SIGCONT)
	g.cmd.Process.Kill()
	g.done <- <-g.done
}

// seriesResult is a group worker's count of handled messages, sampled
// every Step from Start (Unix nanoseconds).
type seriesResult struct {
	Start  int64         `json:"start"`
	Step   time.Duration `json:"step"`
	Counts []int64       `json:"counts"`
}

// rate is the rate between the samples nearest to from and to.
func (s seriesResult) rate(from, to time.Time) (float64, error) {
	at := func(t time.Time) int { return int((t.UnixNano() - s.Start + int64(s.Step)/2) / int64(s.Step)) }
	i, j := at(from), at(to)
	if s.Step <= 0 || i < 0 || j >= len(s.Counts) || j <= i {
		return 0, fmt.Errorf("fairness: phase %v–%v outside the samples", from.Format("15:04:05.000"), to.Format("15:04:05.000"))
	}
	return float64(s.Counts[j]-s.Counts[i]) / (time.Duration(j-i) * s.Step).Seconds(), nil
}

// groupWorker runs n consumers of one group with a no-op handler and counts
// what they handle after a warm-up second. With -step it samples the count
// every step and returns the series (seriesResult).
func groupWorker(args []string) (any, error) {
	fs := flag.NewFlagSet("group", flag.ContinueOnError)
	addr := fs.String("addr", "", "broker address")
	n := fs.Int("consumers", 1, "consumers")
	group := fs.String("group", "g", "consumer group")
	d := fs.Duration("duration", 4*time.Second, "measuring time")
	step := fs.Duration("step", 0, "sample the count this often (0: report the rate only)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var counting atomic.Bool
	var handled atomic.Int64
	var cs []*consumer.Consumer
	for i := range *n {
		c, err := consumer.New(consumer.WithBrokers(*addr), consumer.WithConsumerID(fmt.Sprintf("%s-c%d", *group, i)))
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
		if _, err := c.Subscribe("bench.fair0", *group, func(ctx context.Context, m *consumer.Message) error {
			if counting.Load() {
				handled.Add(1)
			}
			return nil
		}, consumer.StartEarliest(), consumer.PullBatch(64), consumer.MaxUnacked(256)); err != nil {
			return nil, err
		}
	}
	time.Sleep(time.Second)
	counting.Store(true)
	start := time.Now()
	fmt.Println("counting")
	series := seriesResult{Start: start.UnixNano(), Step: *step, Counts: []int64{0}}
	if *step > 0 {
		tick := time.NewTicker(*step)
		for range tick.C {
			// Samples belong to the scheduled instants, not to the tick's
			// (late) delivery: count the missed ones with the same value.
			for due := len(series.Counts); time.Since(start) >= time.Duration(due)*(*step); due++ {
				series.Counts = append(series.Counts, handled.Load())
			}
			if time.Since(start) >= *d {
				break
			}
		}
		tick.Stop()
	} else {
		time.Sleep(*d)
	}
	counting.Store(false)
	elapsed := time.Since(start)
	for _, c := range cs {
		c.Close(context.Background())
	}
	if *step > 0 {
		return series, nil
	}
	return rateResult{Messages: handled.Load(), Elapsed: elapsed}, nil
}

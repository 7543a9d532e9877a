package store

import (
	"bufio"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/clock"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// The crash test re-executes the test binary as a child that appends delayed
// messages with FlushSync and prints "A <id>..." once they are acknowledged,
// and prints "F <id> <due> <now>" for every message that comes out of Due
// before marking it dispatched (the forwarder's order). The parent SIGKILLs
// the child at random moments, restarts it, and finally lets one child run
// until everything acknowledged has come out. It checks that every
// acknowledged message came out, none before its due time, and that a message
// came out twice only when it was handed out in a child that was killed and
// not yet marked: at most one batch (FireBatch) per kill.
//
// QMQ_DELAY_CRASH_RUNS sets the number of kills (default 3 under -short,
// 10 otherwise); e.g. QMQ_DELAY_CRASH_RUNS=50 for a long run.

const (
	crashDirEnv    = "QMQ_DELAY_CRASH_DIR"
	crashRunEnv    = "QMQ_DELAY_CRASH_RUN"
	crashAppendEnv = "QMQ_DELAY_CRASH_APPEND"
	crashFlushEnv  = "QMQ_DELAY_CRASH_FLUSH"
	crashSpeedEnv  = "QMQ_DELAY_CRASH_SPEED" // with crashT0Env: a clock running that many times too fast
	crashT0Env     = "QMQ_DELAY_CRASH_T0"
	crashSpanEnv   = "QMQ_DELAY_CRASH_SPAN" // delays are uniform in [0, span)
	crashFireBatch = 32
)

func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("helper process of TestCrash_SIGKILL")
	}
	run := os.Getenv(crashRunEnv)
	opts := Options{FireBatch: crashFireBatch, CheckpointInterval: 100 * time.Millisecond, Flush: FlushMode(os.Getenv(crashFlushEnv))}
	var clk clock.Clock = clock.Real()
	span := 1500 * time.Millisecond
	if v := os.Getenv(crashSpeedEnv); v != "" {
		speed, _ := strconv.ParseInt(v, 10, 64)
		t0, _ := strconv.ParseInt(os.Getenv(crashT0Env), 10, 64)
		clk = &fastClock{t0: time.Unix(0, t0), speed: speed, epoch: epoch}
		span, _ = time.ParseDuration(os.Getenv(crashSpanEnv))
		// The store's periodic work runs on the fast clock too.
		opts.CheckpointInterval = time.Duration(speed) * 100 * time.Millisecond
		opts.Tick = time.Duration(speed) * 10 * time.Millisecond
	}
	s, err := Open(dir, opts, clk, nil)
	if err != nil {
		fmt.Printf("X open: %v\n", err)
		os.Exit(3)
	}
	var outMu sync.Mutex
	emit := func(b []byte) {
		outMu.Lock()
		os.Stdout.Write(b)
		outMu.Unlock()
	}
	go func() {
		for batch := range s.Due() {
			var b []byte
			refs := make([]Ref, 0, len(batch))
			for _, d := range batch {
				v, err := protocol.ParseMessage(d.Message)
				if err != nil {
					b = fmt.Appendf(b, "X bad message: %v\n", err)
					continue
				}
				b = fmt.Appendf(b, "F %s %d %d\n", v.ID, d.DueMillis, clk.Now().UnixMilli())
				refs = append(refs, d.Ref)
			}
			emit(b)
			if err := s.MarkDispatched(refs); err != nil {
				emit(fmt.Appendf(nil, "X mark: %v\n", err))
			}
		}
	}()
	if os.Getenv(crashAppendEnv) != "1" {
		select {}
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	for seq := 0; ; {
		msgs := make([][]byte, 0, 20)
		ids := make([]string, 0, 20)
		now := clk.Now()
		for i := 0; i < 20; i++ {
			id := fmt.Sprintf("r%s-%d", run, seq)
			seq++
			var due time.Time
			if rng.Intn(10) > 0 {
				due = now.Add(time.Duration(rng.Int63n(int64(span))))
			}
			m, err := protocol.AppendMessage(nil, &protocol.Message{Subject: "crash", ID: id, Body: []byte(id), DeliverAt: due}, protocol.DefaultLimits)
			if err != nil {
				panic(err)
			}
			msgs = append(msgs, m)
			ids = append(ids, id)
		}
		res := s.AppendWait(msgs)
		var acked []string
		for i, r := range res {
			if r.Err == nil {
				acked = append(acked, ids[i])
			}
		}
		emit([]byte("A " + strings.Join(acked, " ") + "\n"))
		time.Sleep(time.Duration(rng.Intn(3)) * time.Millisecond)
	}
}

// fastClock runs speed times faster than the machine's clock from epoch at
// t0, the same in every child, so the time it tells goes on across restarts.
type fastClock struct {
	t0    time.Time
	speed int64
	epoch time.Time
}

func (c *fastClock) Now() time.Time {
	return c.epoch.Add(time.Duration(int64(time.Since(c.t0)) * c.speed))
}

func (c *fastClock) NewTimer(d time.Duration) clock.Timer {
	return &fastTimer{c: c, t: time.NewTimer(d / time.Duration(c.speed))}
}

type fastTimer struct {
	c *fastClock
	t *time.Timer
}

func (t *fastTimer) C() <-chan time.Time { return t.t.C }
func (t *fastTimer) Stop() bool          { return t.t.Stop() }
func (t *fastTimer) Reset(d time.Duration) bool {
	return t.t.Reset(d / time.Duration(t.c.speed))
}
func (t *fastTimer) ResetAt(at time.Time) bool { return t.Reset(at.Sub(t.c.Now())) }

type crashLog struct {
	mu     sync.Mutex
	acked  map[string]bool
	fired  map[string][]int // runs in which each id came out
	early  []string
	errors []string
}

func (c *crashLog) read(t *testing.T, run int, r *bufio.Scanner, done chan<- struct{}) {
	defer close(done)
	for r.Scan() {
		f := strings.Fields(r.Text())
		if len(f) == 0 {
			continue
		}
		c.mu.Lock()
		switch f[0] {
		case "A":
			for _, id := range f[1:] {
				c.acked[id] = true
			}
		case "F":
			if len(f) != 4 {
				break // a line cut by the kill
			}
			due, _ := strconv.ParseInt(f[2], 10, 64)
			now, _ := strconv.ParseInt(f[3], 10, 64)
			if now < due {
				c.early = append(c.early, fmt.Sprintf("%s due %d out at %d", f[1], due, now))
			}
			c.fired[f[1]] = append(c.fired[f[1]], run)
		case "X":
			c.errors = append(c.errors, r.Text())
		}
		c.mu.Unlock()
	}
}

// crashSetup says how children run: flush policy, and optionally a fast
// clock (speed > 0) with delays spread over span of its time.
type crashSetup struct {
	flush FlushMode
	speed int64
	t0    int64
	span  time.Duration
}

func startCrashChild(t *testing.T, dir string, cs crashSetup, run int, appendMode bool, log *crashLog) (*exec.Cmd, chan struct{}) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashRunEnv+"="+strconv.Itoa(run), crashFlushEnv+"="+string(cs.flush))
	if cs.speed > 0 {
		cmd.Env = append(cmd.Env, crashSpeedEnv+"="+strconv.FormatInt(cs.speed, 10),
			crashT0Env+"="+strconv.FormatInt(cs.t0, 10), crashSpanEnv+"="+cs.span.String())
	}
	if appendMode {
		cmd.Env = append(cmd.Env, crashAppendEnv+"=1")
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	go log.read(t, run, sc, done)
	return cmd, done
}

// TestCrash_SIGKILL runs the crash test with FlushSync and, without -short,
// with FlushAsync (whose acknowledged writes survive a killed process too:
// they are in the page cache).
//
// The "hours" variant runs the children on a clock 600 times too fast, with
// delays of up to 90 (fast) minutes: kills then hit hours being loaded in
// steps as the window moves, checkpoints and hour boundaries.
func TestCrash_SIGKILL(t *testing.T) {
	t.Run("sync", func(t *testing.T) { crashTest(t, crashSetup{flush: FlushSync}) })
	t.Run("hours", func(t *testing.T) {
		crashTest(t, crashSetup{flush: FlushSync, speed: 600, t0: time.Now().UnixNano(), span: 90 * time.Minute})
	})
	if !testing.Short() {
		t.Run("async", func(t *testing.T) { crashTest(t, crashSetup{flush: FlushAsync}) })
	}
}

func crashTest(t *testing.T, cs crashSetup) {
	kills := 10
	if testing.Short() {
		kills = 3
	}
	if v := os.Getenv("QMQ_DELAY_CRASH_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("QMQ_DELAY_CRASH_RUNS=%q", v)
		}
		kills = n
	}
	dir := t.TempDir()
	log := &crashLog{acked: make(map[string]bool), fired: make(map[string][]int)}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	for run := 0; run < kills; run++ {
		cmd, done := startCrashChild(t, dir, cs, run, true, log)
		time.Sleep(time.Duration(150+rng.Intn(600)) * time.Millisecond)
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		<-done
	}
	// A last child appends nothing and runs until everything acknowledged
	// has come out.
	cmd, done := startCrashChild(t, dir, cs, kills, false, log)
	deadline := time.Now().Add(30 * time.Second)
	missing := func() []string {
		log.mu.Lock()
		defer log.mu.Unlock()
		var m []string
		for id := range log.acked {
			if len(log.fired[id]) == 0 {
				m = append(m, id)
			}
		}
		return m
	}
	for len(missing()) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // let duplicates, if any, show up
	cmd.Process.Kill()
	cmd.Wait()
	<-done // every reader has finished: log is ours now

	if len(log.errors) > 0 {
		t.Fatalf("child errors: %v", log.errors)
	}
	if len(log.early) > 0 {
		t.Fatalf("%d messages came out early, e.g. %v", len(log.early), log.early[:min(5, len(log.early))])
	}
	if m := missing(); len(m) > 0 {
		t.Fatalf("%d of %d acknowledged messages never came out, e.g. %v", len(m), len(log.acked), m[:min(5, len(m))])
	}
	dupsFrom := make(map[int]int) // killed run → ids handed out there and again later
	dups := 0
	for id, runs := range log.fired {
		if len(runs) == 1 {
			continue
		}
		dups++
		if runs[0] == kills {
			t.Errorf("%s came out %d times in the final run", id, len(runs))
		}
		for i := 1; i < len(runs); i++ {
			if runs[i] == runs[i-1] {
				t.Errorf("%s came out twice in run %d", id, runs[i])
			}
		}
		dupsFrom[runs[0]]++
	}
	for run, n := range dupsFrom {
		if n > crashFireBatch {
			t.Errorf("run %d was killed with %d messages handed out and not marked; at most one batch (%d) may be", run, n, crashFireBatch)
		}
	}
	t.Logf("%d kills: %d messages acknowledged, %d came out (some were never acknowledged), %d sent again after a kill",
		kills, len(log.acked), len(log.fired), dups)
}

package main

// The false-failovers suite: a full-load run of two replicated groups with
// the machine made hostile — a saturated CPU, a disk writer's fsyncs, and
// stop-the-world pauses of the brokers — in which no broker may change its
// role: every master stays master, nobody is elected.
//
// Servers: a meta server with an embedded etcd (child process, default
// broker lease TTL), and two broker groups of qmq-realtime processes (durable
// flush, GOGC=25 so the collector runs four times as often as by default):
//
//	ff1  master --wait-slave + slave (sync)
//	ff2  master + slave without --wait-slave (async: leases)
//
// Load (this process, routes through pkg/metaclient): 16 producers each
// sending one 256-byte message at a time and waiting for its
// acknowledgement (send timeout 10 s), and one consumer (consumer group
// "bench", 4 handlers, acknowledging each message on return).
//
// Stress, for the whole measured span (-false-failovers-for, 5 min):
//
//	cpu    2 × cores child processes spinning (each one goroutine)
//	disk   a child writing 4 MiB blocks to a 512 MiB file in the brokers'
//	       scratch directory, fdatasync after each 16 MiB, round and round
//	pause  every -false-failovers-pause-every (5 s) one broker in turn is
//	       stopped (SIGSTOP) for -false-failovers-pause (300 ms) and
//	       continued: a stop-the-world pause of the whole process
//
// Role changes are read from every broker's /metrics before and after:
//
//	false_failovers               elections won (qmq_failover_elections_total
//	                              outcome won) plus demotions
//	                              (qmq_failover_demotions_total) (target 0)
//	false_failovers_epoch_changes brokers whose qmq_realtime_epoch moved
//	false_failovers_slave_drops   masters' write-state changes to alone or
//	                              readonly (an eligible slave given up) or
//	                              fenced (an async master's leases lapsed) (0)
//	false_failovers_failed_sends  sends that returned an error
//	false_failovers_msgs_per_s    acknowledged sends per second under stress

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/producer"
)

var (
	falseFailoversFor   = flag.Duration("false-failovers-for", 5*time.Minute, "false-failovers: the measured full-load span")
	falseFailoversPause = flag.Duration("false-failovers-pause", 300*time.Millisecond, "false-failovers: how long each broker pause (SIGSTOP) lasts")
	falseFailoversEvery = flag.Duration("false-failovers-pause-every", 5*time.Second, "false-failovers: time between broker pauses (0: none)")
)

const (
	ffHogEnv     = "QMQBENCH_HOG" // "cpu", or "disk:<file>": run a stress child
	ffSubject    = "bench.falsefailovers"
	ffProducers  = 16
	ffDiskBlock  = 4 << 20
	ffDiskSync   = 16 << 20
	ffDiskFile   = 512 << 20
	ffSendWithin = 10 * time.Second
)

func init() {
	register("false-failovers", runFalseFailovers)
	if hog := os.Getenv(ffHogEnv); hog != "" {
		os.Exit(hogMain(hog))
	}
}

// hogMain runs in a stress child until killed.
func hogMain(hog string) int {
	if hog == "cpu" {
		runtime.GOMAXPROCS(1)
		x := uint64(1)
		for {
			x = x*6364136223846793005 + 1442695040888963407
			if x == 0 {
				fmt.Println(x)
			}
		}
	}
	path, ok := strings.CutPrefix(hog, "disk:")
	if !ok {
		fmt.Fprintln(os.Stderr, "unknown hog", hog)
		return 2
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hog:", err)
		return 1
	}
	block := make([]byte, ffDiskBlock)
	for i := range block {
		block[i] = byte(i*31 + 7)
	}
	for off := int64(0); ; {
		if _, err := f.WriteAt(block, off); err != nil {
			fmt.Fprintln(os.Stderr, "hog:", err)
			return 1
		}
		off += ffDiskBlock
		if off%ffDiskSync == 0 {
			_ = syscall.Fdatasync(int(f.Fd()))
		}
		if off >= ffDiskFile {
			off = 0
		}
	}
}

// startHog runs one stress child of this binary.
func startHog(hog string) (*process, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), ffHogEnv+"="+hog)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{name: "hog " + hog, cmd: cmd, out: out, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// ffCounts are one broker's role-change counters.
type ffCounts struct {
	changes, drops, epoch float64
}

func ffRead(n *groupNode) (ffCounts, error) {
	m, err := n.metrics()
	if err != nil {
		return ffCounts{}, err
	}
	var c ffCounts
	for k, v := range m {
		switch {
		case strings.HasPrefix(k, "qmq_failover_elections_total{") && strings.Contains(k, `outcome="won"`):
			c.changes += v
		case strings.HasPrefix(k, "qmq_failover_write_state_changes_total{") &&
			(strings.Contains(k, `state="alone"`) || strings.Contains(k, `state="readonly"`) || strings.Contains(k, `state="fenced"`)) &&
			!strings.Contains(k, `reason="not-registered"`) &&
			!strings.Contains(k, `reason="no-eligible-slave"`) && !strings.Contains(k, `reason="standalone"`) && !strings.Contains(k, `reason="promoted"`):
			c.drops += v
		}
	}
	c.changes += m["qmq_failover_demotions_total"]
	c.epoch = m["qmq_realtime_epoch"]
	return c, nil
}

func runFalseFailovers(env *Env) error {
	addrs, stopMeta, err := startMetaServer(filepath.Join(env.Dir, "ff-meta"), metaFakesEnv+"=0",
		metaTTLEnv+"="+metaserver.NewOptions().BrokerTTL.String())
	if err != nil {
		return err
	}
	defer stopMeta()
	meta, _, _ := strings.Cut(addrs, " ")
	syncM := newGroupNode(env, "ff1-master", "ff1", "--wait-slave")
	syncS := newGroupNode(env, "ff1-slave", "ff1", "--role", "slave", "--wait-slave")
	asyncM := newGroupNode(env, "ff2-master", "ff2")
	asyncS := newGroupNode(env, "ff2-slave", "ff2", "--role", "slave")
	nodes := []*groupNode{syncM, syncS, asyncM, asyncS}
	for _, n := range nodes {
		n.env = []string{"GOGC=25"}
	}
	defer func() {
		for _, n := range nodes {
			if n.p != nil {
				_ = n.p.cmd.Process.Signal(syscall.SIGCONT)
				n.p.stop()
			}
		}
	}()
	for _, n := range []*groupNode{syncM, asyncM} {
		if err := env.startNode(n, []string{meta}); err != nil {
			return err
		}
		if err := waitWritableAlone(n, 30*time.Second); err != nil {
			return err
		}
	}
	for _, n := range []*groupNode{syncS, asyncS} {
		if err := env.startNode(n, []string{meta}); err != nil {
			return err
		}
	}
	if err := waitRoles(syncM, syncS, 60*time.Second); err != nil {
		return err
	}
	if err := waitRoles(asyncM, asyncS, 60*time.Second); err != nil {
		return err
	}

	mc, err := metaclient.New([]string{meta}, "bench-false-failovers", metaclient.WithRefreshInterval(time.Second))
	if err != nil {
		return err
	}
	defer mc.Close()
	var consumed atomic.Int64
	c, err := consumer.New(consumer.WithResolver(mc), consumer.WithConsumerID("bench-ff-c1"))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if _, err := c.Subscribe(ffSubject, "bench", func(ctx context.Context, m *consumer.Message) error {
		consumed.Add(1)
		return nil
	}, consumer.StartEarliest(), consumer.Concurrency(4)); err != nil {
		return err
	}
	ps := make([]*producer.Producer, ffProducers)
	for i := range ps {
		if ps[i], err = producer.New(producer.WithResolver(mc), producer.WithSendTimeout(ffSendWithin)); err != nil {
			return err
		}
		defer ps[i].Close(context.Background())
	}
	load := startSenders(ps, ffSubject, 256, ffSendWithin, 0, 0)
	defer load.halt()
	time.Sleep(3 * time.Second)

	before := make([]ffCounts, len(nodes))
	for i, n := range nodes {
		if before[i], err = ffRead(n); err != nil {
			return err
		}
	}
	acked0, failed0 := load.total()

	var hogs []*process
	defer func() {
		for _, h := range hogs {
			h.kill()
		}
	}()
	for range 2 * runtime.NumCPU() {
		h, err := startHog("cpu")
		if err != nil {
			return err
		}
		hogs = append(hogs, h)
	}
	h, err := startHog("disk:" + filepath.Join(env.Dir, "ff-disk-hog"))
	if err != nil {
		return err
	}
	hogs = append(hogs, h)
	start := time.Now()
	env.Logf("stress on: %d cpu hogs, a disk writer, a %v pause every %v; for %v", 2*runtime.NumCPU(), *falseFailoversPause, *falseFailoversEvery, *falseFailoversFor)

	pauses := 0
	nextLog := start.Add(30 * time.Second)
	var tick <-chan time.Time
	if *falseFailoversEvery > 0 {
		t := time.NewTicker(*falseFailoversEvery)
		defer t.Stop()
		tick = t.C
	}
	deadline := time.After(*falseFailoversFor)
run:
	for {
		select {
		case <-deadline:
			break run
		case <-tick:
			n := nodes[pauses%len(nodes)]
			pauses++
			_ = n.p.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(*falseFailoversPause)
			_ = n.p.cmd.Process.Signal(syscall.SIGCONT)
		}
		if time.Now().After(nextLog) {
			nextLog = nextLog.Add(30 * time.Second)
			acked, failed := load.total()
			var roles []string
			for _, n := range nodes {
				m, err := n.metrics()
				if err != nil {
					roles = append(roles, n.name+" ?")
					continue
				}
				roles = append(roles, fmt.Sprintf("%s role %v state %v", n.name, m["qmq_realtime_role"], m["qmq_failover_write_state"]))
			}
			env.Logf("%v: %d acked, %d failed; %s", time.Since(start).Round(time.Second), acked-acked0, failed-failed0, strings.Join(roles, ", "))
		}
	}
	elapsed := time.Since(start)
	for _, h := range hogs {
		h.kill()
	}
	hogs = nil
	acked1, failed1 := load.total()
	// Let a pause's effects show before reading the counters.
	time.Sleep(2 * time.Second)
	var changes, drops, epochs float64
	for i, n := range nodes {
		after, err := ffRead(n)
		if err != nil {
			return err
		}
		changes += after.changes - before[i].changes
		drops += after.drops - before[i].drops
		if after.epoch != before[i].epoch {
			epochs++
		}
		if after.changes != before[i].changes || after.drops != before[i].drops || after.epoch != before[i].epoch {
			env.Logf("%s: role changes %v → %v, slave drops %v → %v, epoch %v → %v", n.name,
				before[i].changes, after.changes, before[i].drops, after.drops, before[i].epoch, after.epoch)
		}
	}
	load.halt()
	if failed1 > failed0 {
		env.Logf("failed sends:%s", load.errorSummary())
	}
	env.Logf("%d pauses of %v over %v; %d messages consumed in all", pauses, *falseFailoversPause, elapsed.Round(time.Second), consumed.Load())
	env.Metric("false_failovers", changes, "role changes")
	env.Metric("false_failovers_epoch_changes", epochs, "brokers")
	env.Metric("false_failovers_slave_drops", drops, "changes")
	env.Metric("false_failovers_failed_sends", float64(failed1-failed0), "sends")
	env.Metric("false_failovers_msgs_per_s", float64(acked1-acked0)/elapsed.Seconds(), "msg/s")
	return nil
}

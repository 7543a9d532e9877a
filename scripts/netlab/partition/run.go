package partition

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/qmq-go/qmq/scripts/netlab"
)

// Subject is the subject the client produces and consumes.
const Subject = "partition.load"

// Options configure Run.
type Options struct {
	// Bin is the directory holding qmq-metaserver, qmq-realtime and
	// qmq-delay. Required.
	Bin string
	// Dir is a scratch directory (data and logs). Required.
	Dir string
	// Client is the command (program and leading arguments) that runs
	// ClientMain with the arguments appended. Required.
	Client []string
	// ClientEnv is added to the client's environment.
	ClientEnv []string
	// Delay adds the delay group (dl1, dl2) and delayed sends.
	Delay bool
	// Scenarios to run in order, by name (doc.go). Default: all.
	Scenarios []string
	// Hold is how long each cut lasts. Default 6 s.
	Hold time.Duration
	// Warmup is the load before the first cut. Default 3 s.
	Warmup time.Duration
	// DrainTimeout bounds the wait for every acknowledged message to be
	// consumed at the end. Default 60 s.
	DrainTimeout time.Duration
	// DualWindow is dual_master_acks' window. Default 3 s.
	DualWindow time.Duration
	// Logf reports progress (nil: nothing).
	Logf func(format string, args ...any)
}

// ScenarioNames lists every scenario, in the default order.
var ScenarioNames = []string{"master-meta", "master-slave", "master-isolated", "client-meta", "asymmetric", "slow"}

func (o *Options) withDefaults() {
	if len(o.Scenarios) == 0 {
		o.Scenarios = ScenarioNames
	}
	if o.Hold == 0 {
		o.Hold = 6 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = 3 * time.Second
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = 60 * time.Second
	}
	if o.DualWindow == 0 {
		o.DualWindow = 3 * time.Second
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
}

// Validate names the first setting that cannot work.
func (o *Options) Validate() error {
	switch {
	case o.Bin == "":
		return errors.New("partition: Bin is required")
	case o.Dir == "":
		return errors.New("partition: Dir is required")
	case len(o.Client) == 0:
		return errors.New("partition: Client is required")
	}
	for _, s := range o.Scenarios {
		if scenarios[s] == nil {
			return fmt.Errorf("partition: unknown scenario %q", s)
		}
	}
	return nil
}

// ScenarioResult is what one cut did.
type ScenarioResult struct {
	Name string
	// Recovery is, per group, the heal to the group's first routed
	// acknowledgement after it.
	Recovery map[string]time.Duration
	// Stall is, per group, the longest time from the cut to its recovery
	// without a routed acknowledgement.
	Stall map[string]time.Duration
	// Rejoin is the heal to every group paired again (0: not within the
	// bound; Err says why).
	Rejoin time.Duration
	Err    error
}

// Slowest is the largest of Recovery.
func (s ScenarioResult) Slowest() time.Duration {
	var m time.Duration
	for _, d := range s.Recovery {
		m = max(m, d)
	}
	return m
}

// Result is the whole run's figures.
type Result struct {
	Scenarios      []ScenarioResult
	LostAcked      int
	Acked          int
	DualMasterAcks int
	EarlyDelayed   int
	FailedSends    map[string]int
	// HealRecovery is the slowest group's recovery in the worst scenario.
	HealRecovery time.Duration
}

// Run builds the lab and the cluster, runs the load and the scenarios,
// and removes everything. An error from netlab.New wraps
// netlab.ErrUnsupported where namespaces are refused.
func Run(o Options) (*Result, error) {
	o.withDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	hosts := []string{"meta", "rt1", "rt2", "cli"}
	if o.Delay {
		hosts = append(hosts, "dl1", "dl2")
	}
	lab, err := netlab.New(hosts...)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Lab: lab, dir: o.Dir, groups: map[string][2]*server{}}
	defer c.Close()
	if err := c.startAll(o); err != nil {
		return nil, err
	}
	o.Logf("cluster up: %s", c.describe())

	// The client.
	args := append(append([]string(nil), o.Client[1:]...), "-meta", c.meta.addr, "-subject", Subject)
	for _, s := range c.groups[RealtimeGroup] {
		args = append(args, "-probe", s.name+"="+s.addr)
	}
	if o.Delay {
		args = append(args, "-delay")
		for _, s := range c.groups[DelayGroup] {
			args = append(args, "-delay-probe", s.name+"="+s.addr)
		}
	}
	cmd, err := lab.Command("cli", o.Client[0], args...)
	if err != nil {
		return nil, err
	}
	cmd.Env = append(os.Environ(), o.ClientEnv...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	clientLog, err := os.Create(filepath.Join(o.Dir, "client.log"))
	if err != nil {
		return nil, err
	}
	defer clientLog.Close()
	cmd.Stderr = clientLog
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start client: %w", err)
	}
	led := newLedger()
	readDone := make(chan struct{})
	go func() { led.read(stdout); close(readDone) }()
	defer func() {
		cmd.Process.Kill()
		<-readDone
		cmd.Wait()
	}()
	if err := waitFor(60*time.Second, "first acknowledged sends", func() error {
		if _, ok := led.firstAckAfter("r", time.Time{}); !ok {
			return errors.New("none yet")
		}
		if o.Delay {
			if _, ok := led.firstAckAfter("d", time.Time{}); !ok {
				return errors.New("no delayed one yet")
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	time.Sleep(o.Warmup)

	res := &Result{}
	for _, name := range o.Scenarios {
		sr := c.runScenario(o, led, name)
		res.Scenarios = append(res.Scenarios, sr)
		o.Logf("%s: recovery %v, longest stall %v, rejoin %v, err %v", name, sr.Recovery, sr.Stall, sr.Rejoin, sr.Err)
	}

	stdin.Close()
	select {
	case <-led.stopped:
	case <-time.After(30 * time.Second):
		return nil, errors.New("the client did not stop sending")
	}
	var lost, acked int
	waitFor(o.DrainTimeout, "every acknowledged message consumed", func() error {
		lost, acked = led.lost()
		if lost > 0 {
			return fmt.Errorf("%d of %d not consumed", lost, acked)
		}
		return nil
	})
	res.LostAcked, res.Acked = lost, acked
	for _, g := range c.groups {
		res.DualMasterAcks += led.dualMasterAcks(g[0].name, g[1].name, o.DualWindow)
	}
	led.mu.Lock()
	res.EarlyDelayed = led.early
	res.FailedSends = map[string]int{}
	for k, v := range led.fails {
		res.FailedSends[k] = v
	}
	led.mu.Unlock()
	for _, s := range res.Scenarios {
		res.HealRecovery = max(res.HealRecovery, s.Slowest())
	}
	return res, nil
}

// startAll starts the meta server, then each group's master, then its
// slave.
func (c *Cluster) startAll(o Options) error {
	c.meta = &server{name: "meta", host: "meta", kind: "meta", bin: filepath.Join(o.Bin, "qmq-metaserver"),
		addr: c.addr("meta", metaPort), http: c.addr("meta", metaHTTPPort)}
	c.meta.args = []string{"--addr", c.meta.addr, "--http-addr", c.meta.http, "--data-dir", filepath.Join(o.Dir, "meta"),
		"--etcd-listen", "127.0.0.1:2379", "--etcd-peer", "127.0.0.1:2380", "--insecure", "--min-groups", "1", "--log-level", "warn"}
	if err := c.start(c.meta); err != nil {
		return err
	}
	if err := c.waitHealthy(c.meta, 60*time.Second); err != nil {
		return err
	}
	type groupSpec struct {
		group, kind, prefix string
		port, httpPort      int
	}
	specs := []groupSpec{{RealtimeGroup, "realtime", "rt", rtPort, rtHTTPPort}}
	if o.Delay {
		specs = append(specs, groupSpec{DelayGroup, "delay", "dl", dlPort, dlHTTPPort})
	}
	for _, g := range specs {
		var pair [2]*server
		for i, role := range []string{"master", "slave"} {
			host := fmt.Sprintf("%s%d", g.prefix, i+1)
			s := &server{name: host, host: host, kind: g.kind, bin: filepath.Join(o.Bin, "qmq-"+g.kind),
				addr: c.addr(host, g.port), http: c.addr(host, g.httpPort)}
			s.args = []string{"--group", g.group, "--addr", s.addr, "--http-addr", s.http,
				"--data-dir", filepath.Join(o.Dir, host), "--meta", c.meta.addr, "--role", role,
				"--wait-slave", "--insecure", "--log-level", "warn"}
			pair[i] = s
		}
		c.groups[g.group] = pair
		if err := c.start(pair[0]); err != nil {
			return err
		}
		if err := c.waitHealthy(pair[0], 60*time.Second); err != nil {
			return err
		}
		if err := waitFor(60*time.Second, pair[0].name+" master", func() error {
			if r := c.role(pair[0]); r != 1 {
				return fmt.Errorf("role %v", r)
			}
			return nil
		}); err != nil {
			return err
		}
		if err := c.start(pair[1]); err != nil {
			return err
		}
		if err := c.waitHealthy(pair[1], 60*time.Second); err != nil {
			return err
		}
		if err := waitFor(60*time.Second, g.group+" paired", func() error { return c.paired(g.group) }); err != nil {
			return fmt.Errorf("%w: %s", err, c.logTail(pair[0]))
		}
	}
	return nil
}

func (c *Cluster) describe() string {
	s := "meta " + c.meta.addr
	for _, g := range c.groupNames() {
		p := c.groups[g]
		s += fmt.Sprintf(", %s %s %s / %s %s", g, p[0].name, p[0].addr, p[1].name, p[1].addr)
	}
	return s
}

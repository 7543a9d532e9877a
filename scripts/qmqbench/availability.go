package main

// Shared parts of the availability suites (slave_crash.go, meta_outage.go,
// false_failovers.go): qmq-realtime processes registered with a meta
// server in a named group, their /metrics read as sums per series name, and
// synchronous senders that record every acknowledgement's time per sender.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/qmq-go/qmq/producer"
)

// groupNode is one broker of a group (qmq-realtime, or qmq-delay when kind
// is "delay") registered with the meta servers; its addresses and directory
// outlive its processes, so a killed node restarts as the same broker.
type groupNode struct {
	name, group, dir, addr, http string
	kind                         string   // "realtime" or "delay"
	args                         []string // extra flags (--wait-slave, --role slave, ...)
	env                          []string // extra environment (GOGC=...)
	p                            *process
}

func newGroupNode(env *Env, name, group string, args ...string) *groupNode {
	return &groupNode{name: name, group: group, kind: "realtime", dir: filepath.Join(env.Dir, name), addr: freeAddr(), http: freeAddr(), args: args}
}

// role is the name of the node's role gauge (1 master, 2 slave).
func (n *groupNode) role() string { return "qmq_" + n.kind + "_role" }

// start runs the node's process against the meta servers metas and waits
// for its /healthz.
func (e *Env) startNode(n *groupNode, metas []string) error {
	args := []string{"--group", n.group, "--addr", n.addr, "--http-addr", n.http, "--data-dir", n.dir,
		"--meta", strings.Join(metas, ","), "--log-level", "warn"}
	cmd := exec.Command(filepath.Join(e.Bin, "qmq-"+n.kind), append(args, n.args...)...)
	cmd.Env = append(os.Environ(), n.env...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", n.name, err)
	}
	p := &process{name: "qmq-" + n.kind + " " + n.name, cmd: cmd, out: out, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	if err := p.waitHTTP("http://"+n.http+"/healthz", 60*time.Second); err != nil {
		p.kill()
		return err
	}
	n.p = p
	return nil
}

// metrics reads the node's /metrics: each series name (labels dropped) with
// the sum of its values, and each full series line's value under its name
// with labels.
func (n *groupNode) metrics() (map[string]float64, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + n.http + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		series := line[:i]
		out[series] = v
		if j := strings.IndexByte(series, '{'); j >= 0 {
			out[series[:j]] += v
		}
	}
	return out, nil
}

// metric reads one series (by name, summed over its labels).
func (n *groupNode) metric(name string) (float64, error) {
	m, err := n.metrics()
	if err != nil {
		return 0, err
	}
	v, ok := m[name]
	if !ok {
		return 0, fmt.Errorf("%s: no metric %s", n.name, name)
	}
	return v, nil
}

// waitRoles waits until master is a master whose replies wait for slave
// (sync mode: it records slave as eligible and is writable) or, in async
// mode, until it records an eligible slave.
func waitRoles(master, slave *groupNode, timeout time.Duration) error {
	return waitFor(timeout, master.name+" master of "+slave.name, func() error {
		m, err := master.metrics()
		if err != nil {
			return err
		}
		srole, err := slave.metric(slave.role())
		if err != nil {
			return err
		}
		if m[master.role()] != 1 || srole != 2 || m["qmq_failover_eligible_slave"] != 1 || m["qmq_failover_write_state"] != 1 {
			return fmt.Errorf("roles %v/%v, eligible slave %v, write state %v", m[master.role()], srole,
				m["qmq_failover_eligible_slave"], m["qmq_failover_write_state"])
		}
		return nil
	})
}

// waitWritableAlone waits until a master without a slave takes writes.
func waitWritableAlone(n *groupNode, timeout time.Duration) error {
	return waitFor(timeout, n.name+" writable", func() error {
		m, err := n.metrics()
		if err != nil {
			return err
		}
		if m[n.role()] != 1 || m["qmq_failover_writable"] != 1 {
			return fmt.Errorf("role %v, writable %v", m[n.role()], m["qmq_failover_writable"])
		}
		return nil
	})
}

// ackLog is what synchronous senders saw: per sender, the times of its
// acknowledgements, and the failures.
type ackLog struct {
	mu     sync.Mutex
	acks   [][]time.Time        // per sender
	ids    []string             // acknowledged
	due    map[string]time.Time // acknowledged delayed messages: when due
	fails  int
	errs   map[string]int // first words of the errors, counted
	failAt []time.Time
	stop   chan struct{}
	wg     sync.WaitGroup
}

// startSenders runs one goroutine per producer, each sending unique
// messages to subject one at a time (Send waits for the acknowledgement),
// with timeout per Send. The last `delayed` producers send messages due
// delayBy after they are sent (to delay groups).
func startSenders(ps []*producer.Producer, subject string, body int, timeout time.Duration, delayed int, delayBy time.Duration) *ackLog {
	l := &ackLog{acks: make([][]time.Time, len(ps)), errs: map[string]int{}, due: map[string]time.Time{}, stop: make(chan struct{})}
	payload := make([]byte, body)
	for g, p := range ps {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				id := fmt.Sprintf("p%d-%d", g, i)
				msg := &producer.Message{Subject: subject, ID: id, Body: payload}
				if g >= len(ps)-delayed {
					msg.DeliverAt = time.Now().Add(delayBy)
				}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				err := p.Send(ctx, msg)
				cancel()
				now := time.Now()
				l.mu.Lock()
				if err == nil {
					l.acks[g] = append(l.acks[g], now)
					l.ids = append(l.ids, id)
					if !msg.DeliverAt.IsZero() {
						l.due[id] = msg.DeliverAt
					}
				} else {
					l.fails++
					l.failAt = append(l.failAt, now)
					msg := err.Error()
					if len(msg) > 120 {
						msg = msg[:120]
					}
					l.errs[msg]++
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// ackedIDs returns the ids of the acknowledged messages.
func (l *ackLog) ackedIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ids...)
}

// halt stops the senders and waits for them.
func (l *ackLog) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
		l.wg.Wait()
	}
}

// total returns the acknowledgements and failures so far.
func (l *ackLog) total() (acked, failed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.acks {
		acked += len(a)
	}
	return acked, l.fails
}

// maxGap returns the longest time any sender waited between two
// acknowledgements (or from `from` to its first one, or from its last one
// to `to`) within [from, to].
func (l *ackLog) maxGap(from, to time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var worst time.Duration
	for _, acks := range l.acks {
		prev := from
		for _, t := range acks {
			if t.Before(from) {
				continue
			}
			if t.After(to) {
				break
			}
			worst = max(worst, t.Sub(prev))
			prev = t
		}
		worst = max(worst, to.Sub(prev))
	}
	return worst
}

// errorSummary lists the distinct errors with their counts.
func (l *ackLog) errorSummary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for msg, n := range l.errs {
		fmt.Fprintf(&b, "\n  %d× %s", n, msg)
	}
	return b.String()
}

// pollFor is waitFor polling every interval.
func pollFor(timeout, interval time.Duration, what string, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not after %v: %w", what, timeout, err)
		}
		time.Sleep(interval)
	}
}

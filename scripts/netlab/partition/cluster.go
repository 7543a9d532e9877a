package partition

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/qmq-go/qmq/scripts/netlab"
)

const (
	metaPort     = 9000
	metaHTTPPort = 9080
	rtPort       = 9100
	rtHTTPPort   = 9180
	dlPort       = 9200
	dlHTTPPort   = 9280
	// Group names of the cluster.
	RealtimeGroup = "prt"
	DelayGroup    = "pdl"
)

// server is one broker or the meta server: its host, addresses and
// process.
type server struct {
	name, host, bin string
	kind            string // "meta", "realtime", "delay"
	addr, http      string
	args            []string
	log             *os.File
	cmd             *exec.Cmd
	done            chan error
}

// Cluster is the lab and the servers running in it.
type Cluster struct {
	Lab  *netlab.Lab
	dir  string
	meta *server
	// brokers by group: [0] started as master, [1] as slave.
	groups map[string][2]*server
}

func (c *Cluster) addr(host string, port int) string {
	return fmt.Sprintf("%s:%d", c.Lab.Host(host).Addr, port)
}

// start runs s in its host, its output in dir/<name>.log.
func (c *Cluster) start(s *server) error {
	f, err := os.OpenFile(filepath.Join(c.dir, s.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd, err := c.Lab.Command(s.host, s.bin, s.args...)
	if err != nil {
		f.Close()
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	s.log, s.cmd, s.done = f, cmd, make(chan error, 1)
	go func() { s.done <- cmd.Wait() }()
	return nil
}

// stop ends s by its pid: SIGTERM, SIGKILL after grace.
func (s *server) stop(grace time.Duration) {
	if s == nil || s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(grace):
		s.cmd.Process.Kill()
		<-s.done
	}
	s.log.Close()
	s.cmd = nil
}

// logTail is the end of s's log, for errors.
func (c *Cluster) logTail(s *server) string {
	b, _ := os.ReadFile(filepath.Join(c.dir, s.name+".log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// metrics reads s's /metrics from inside its own host (cuts do not
// matter).
func (c *Cluster) metrics(s *server) (map[string]float64, error) {
	hc := c.Lab.HTTPClient(s.host, 2*time.Second)
	resp, err := hc.Get("http://" + s.http + "/metrics")
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
		f := strings.Fields(line)
		name, _, _ := strings.Cut(f[0], "{")
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			if _, seen := out[name]; !seen {
				out[name] = v
			}
		}
	}
	return out, nil
}

// role is s's role gauge: 1 master, 2 slave, 0 changing (or unreadable).
func (c *Cluster) role(s *server) float64 {
	m, err := c.metrics(s)
	if err != nil {
		return 0
	}
	return m["qmq_"+s.kind+"_role"]
}

// waitHealthy waits until s answers /healthz.
func (c *Cluster) waitHealthy(s *server, timeout time.Duration) error {
	hc := c.Lab.HTTPClient(s.host, time.Second)
	return waitFor(timeout, s.name+" healthy", func() error {
		select {
		case err := <-s.done:
			s.done <- err
			return fmt.Errorf("exited (%v): %s", err, c.logTail(s))
		default:
		}
		resp, err := hc.Get("http://" + s.http + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
}

// masterSlave returns group's current master and slave, or an error when
// it is not one master and one slave.
func (c *Cluster) masterSlave(group string) (master, slave *server, err error) {
	pair := c.groups[group]
	r0, r1 := c.role(pair[0]), c.role(pair[1])
	switch {
	case r0 == 1 && r1 == 2:
		return pair[0], pair[1], nil
	case r0 == 2 && r1 == 1:
		return pair[1], pair[0], nil
	}
	return nil, nil, fmt.Errorf("group %s: roles %s=%v %s=%v", group, pair[0].name, r0, pair[1].name, r1)
}

// paired reports whether group is a master whose writes wait for its slave
// again (write state writable and the slave eligible).
func (c *Cluster) paired(group string) error {
	m, _, err := c.masterSlave(group)
	if err != nil {
		return err
	}
	vals, err := c.metrics(m)
	if err != nil {
		return err
	}
	if vals["qmq_failover_eligible_slave"] != 1 {
		return fmt.Errorf("group %s: master %s has no eligible slave", group, m.name)
	}
	return nil
}

// groupNames lists the cluster's groups.
func (c *Cluster) groupNames() []string {
	out := []string{RealtimeGroup}
	if _, ok := c.groups[DelayGroup]; ok {
		out = append(out, DelayGroup)
	}
	return out
}

// Close stops every server and removes the lab.
func (c *Cluster) Close() error {
	for _, g := range c.groups {
		g[0].stop(5 * time.Second)
		g[1].stop(5 * time.Second)
	}
	c.meta.stop(10 * time.Second)
	return c.Lab.Close()
}

// waitFor polls cond every 50 ms until it holds or timeout passes.
func waitFor(timeout time.Duration, what string, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not after %v: %w", what, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

package main

// The replication suite's failover part: a broker group of two
// qmq-realtime processes started with --wait-slave, registered with a meta
// server (child process, etcd embedded, the meta server's default broker
// lease TTL: a sync-mode failover does not wait for it), under
// steady produce and consume load (producers and a consumer group
// resolving routes through the meta server). The master is SIGKILLed ten
// times; each time the slave wins the group and serves, and the killed
// broker is restarted on its directory, rejoins as the new slave and
// catches up before the next kill. At the end every acknowledged message
// is consumed.
//
//	failover_seconds_p99   the 99th percentile (nearest rank: over ten kills,
//	                       the slowest) of SIGKILL to the first send
//	                       acknowledged by the new master (target ≤ 2)
//	failover_seconds       the slowest of the kills
//	failover_seconds_mean  the mean over the kills
//	failover_lost_acked    acknowledged messages never consumed (target 0)

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/producer"
)

const (
	rfKills     = 10
	rfGroup     = "rf"
	rfSubject   = "bench.replfailover"
	rfSenders   = 8
	rfLoadAfter = time.Second // load between the slave catching up and the next kill
)

func init() {
	// Also alone, without the throughput rounds before it.
	register("replication-failover", runReplicationFailover)
}

// rfNode is one broker of the group: its addresses and directory outlive
// its processes.
type rfNode struct {
	name, dir, addr, http string
	p                     *process
}

func (e *Env) rfStart(n *rfNode, meta string) error {
	p, err := startProcess("qmq-realtime "+n.name, filepath.Join(e.Bin, "qmq-realtime"),
		"--group", rfGroup, "--addr", n.addr, "--http-addr", n.http, "--data-dir", n.dir, "--meta", meta,
		"--role", "master", "--wait-slave", "--log-level", "warn")
	if err != nil {
		return err
	}
	if err := p.waitHTTP("http://"+n.http+"/healthz", 60*time.Second); err != nil {
		p.kill()
		return err
	}
	n.p = p
	return nil
}

// gauge reads one of the node's metrics.
func (n *rfNode) gauge(name string) (float64, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + n.http + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			return strconv.ParseFloat(f[len(f)-1], 64)
		}
	}
	return 0, fmt.Errorf("%s: no metric %s", n.name, name)
}

// waitFor polls cond until it holds or timeout passes.
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

// rfPair waits until master serves as the master and slave as its slave,
// and the master's send replies wait for the slave again (it is not
// serving alone: a kill now loses nothing acknowledged).
func rfPair(master, slave *rfNode) error {
	return waitFor(60*time.Second, master.name+" master of "+slave.name, func() error {
		role, err := master.gauge("qmq_realtime_role")
		if err != nil {
			return err
		}
		srole, err := slave.gauge("qmq_realtime_role")
		if err != nil {
			return err
		}
		alone, err := master.gauge("qmq_realtime_serving_alone")
		if err != nil {
			return err
		}
		copied, err := master.gauge("qmq_realtime_slave_offset_bytes")
		if err != nil {
			return err
		}
		if role != 1 || srole != 2 || alone != 0 || copied < 0 {
			return fmt.Errorf("roles %v/%v, serving alone %v, slave offset %v", role, srole, alone, copied)
		}
		return nil
	})
}

// rfLoad sends unique messages from several goroutines, remembering the
// acknowledged ones with their times.
type rfLoad struct {
	mu    sync.Mutex
	acked map[string]bool
	times []time.Time
	fails int
	stop  chan struct{}
	wg    sync.WaitGroup
}

func startRFLoad(p *producer.Producer) *rfLoad {
	l := &rfLoad{acked: map[string]bool{}, stop: make(chan struct{})}
	for g := range rfSenders {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				id := fmt.Sprintf("s%d-%d", g, i)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := p.Send(ctx, &producer.Message{Subject: rfSubject, ID: id, Body: []byte(id)})
				cancel()
				now := time.Now()
				l.mu.Lock()
				if err == nil {
					l.acked[id] = true
					l.times = append(l.times, now)
				} else {
					l.fails++
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// firstAckAfter returns when the first send after t was acknowledged.
func (l *rfLoad) firstAckAfter(t time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := len(l.times)
	for i > 0 && l.times[i-1].After(t) {
		i--
	}
	if i == len(l.times) {
		return time.Time{}, false
	}
	return l.times[i], true
}

func runReplicationFailover(env *Env) error {
	addrs, stopMeta, err := startMetaServer(filepath.Join(env.Dir, "rf-meta"), metaFakesEnv+"=0", metaTTLEnv+"="+metaserver.NewOptions().BrokerTTL.String())
	if err != nil {
		return err
	}
	defer stopMeta()
	meta, _, _ := strings.Cut(addrs, " ")
	nodes := [2]*rfNode{
		{name: "A", dir: filepath.Join(env.Dir, "rf-a"), addr: freeAddr(), http: freeAddr()},
		{name: "B", dir: filepath.Join(env.Dir, "rf-b"), addr: freeAddr(), http: freeAddr()},
	}
	defer func() {
		for _, n := range nodes {
			if n.p != nil {
				n.p.stop()
			}
		}
	}()
	if err := env.rfStart(nodes[0], meta); err != nil {
		return err
	}
	if err := waitFor(30*time.Second, "A master", func() error {
		v, err := nodes[0].gauge("qmq_realtime_role")
		if err == nil && v != 1 {
			err = fmt.Errorf("role %v", v)
		}
		return err
	}); err != nil {
		return err
	}
	if err := env.rfStart(nodes[1], meta); err != nil {
		return err
	}
	master, slave := nodes[0], nodes[1]
	if err := rfPair(master, slave); err != nil {
		return err
	}

	mc, err := metaclient.New([]string{meta}, "bench-replication-failover", metaclient.WithRefreshInterval(time.Second))
	if err != nil {
		return err
	}
	defer mc.Close()
	p, err := producer.New(producer.WithResolver(mc), producer.WithSendTimeout(30*time.Second))
	if err != nil {
		return err
	}
	defer p.Close(context.Background())
	var recvMu sync.Mutex
	received := map[string]bool{}
	c, err := consumer.New(consumer.WithResolver(mc), consumer.WithConsumerID("bench-c1"))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if _, err := c.Subscribe(rfSubject, "bench", func(ctx context.Context, m *consumer.Message) error {
		recvMu.Lock()
		received[m.ID] = true
		recvMu.Unlock()
		return nil
	}, consumer.StartEarliest(), consumer.Concurrency(4)); err != nil {
		return err
	}
	load := startRFLoad(p)
	stopLoad := func() {
		select {
		case <-load.stop:
		default:
			close(load.stop)
			load.wg.Wait()
		}
	}
	defer stopLoad()

	var took []float64
	for kill := 1; kill <= rfKills; kill++ {
		time.Sleep(rfLoadAfter)
		killed := time.Now()
		master.p.kill()
		master.p = nil
		// A reply already on its way from the killed master is not the new
		// master's: only acknowledgements 100 ms after the kill count.
		var first time.Time
		if err := waitFor(60*time.Second, fmt.Sprintf("kill %d: a send acknowledged by %s", kill, slave.name), func() error {
			at, ok := load.firstAckAfter(killed.Add(100 * time.Millisecond))
			if !ok {
				return fmt.Errorf("none yet")
			}
			first = at
			return nil
		}); err != nil {
			return err
		}
		d := first.Sub(killed).Seconds()
		took = append(took, d)
		if err := env.rfStart(master, meta); err != nil {
			return fmt.Errorf("kill %d: restart %s: %w", kill, master.name, err)
		}
		master, slave = slave, master
		if err := rfPair(master, slave); err != nil {
			return fmt.Errorf("kill %d: %w", kill, err)
		}
		load.mu.Lock()
		n, fails := len(load.acked), load.fails
		load.mu.Unlock()
		env.Logf("kill %d: %s took over in %.2f s; %d sends acknowledged so far, %d failed", kill, master.name, d, n, fails)
	}
	stopLoad()
	load.mu.Lock()
	acked := load.acked
	load.mu.Unlock()
	lost := 0
	err = waitFor(60*time.Second, "every acknowledged message consumed", func() error {
		recvMu.Lock()
		defer recvMu.Unlock()
		lost = 0
		for id := range acked {
			if !received[id] {
				lost++
			}
		}
		if lost > 0 {
			return fmt.Errorf("%d of %d not consumed", lost, len(acked))
		}
		return nil
	})
	if err != nil {
		env.Logf("%v", err)
	}
	env.Logf("%d messages acknowledged over %d kills, %d sends failed", len(acked), rfKills, load.fails)
	sort.Float64s(took)
	total := 0.0
	for _, d := range took {
		total += d
	}
	p99 := took[int(math.Ceil(0.99*float64(len(took))))-1] // nearest rank
	env.Metric("failover_seconds_p99", p99, "s")
	env.Metric("failover_seconds", took[len(took)-1], "s")
	env.Metric("failover_seconds_mean", total/float64(len(took)), "s")
	env.Metric("failover_lost_acked", float64(lost), "messages")
	return nil
}

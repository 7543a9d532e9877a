package main

// The meta-outage suite: every meta server and etcd stopped under produce
// and consume load, then started again.
//
// Control plane (child processes of this binary, fixed loopback addresses
// so they come back where brokers and clients look for them): a
// single-node etcd (pkg/devetcd) and meta servers A and B on it; broker
// lease TTL 10 s (the default), new routes get all three realtime groups. Brokers
// (qmq-realtime, durable flush, registered with both meta servers):
//
//	mo1  a master alone (no slave)
//	mo2  master --wait-slave + slave (sync: every ack waits for the slave)
//	mo3  master + slave without --wait-slave (async: leases)
//	mo4  a qmq-delay master alone, forwarding due messages to the above
//
// Clients (this process, through one pkg/metaclient on both meta servers,
// route refresh every second): 8 producers, each sending one 256-byte
// message with a unique id at a time and waiting for its acknowledgement
// (send timeout 5 s), six of them to the realtime groups and two delayed
// by 2 s (to mo4), and one consumer (consumer group "bench", 4 handlers,
// acknowledging each message on return). After five seconds of load both
// meta servers and etcd are SIGKILLed, stay down -meta-outage-for (60 s),
// start again on their data, and the load runs ten more seconds
// (-meta-outage-stop meta or etcd stops only those); then every
// acknowledged message must be consumed. With -meta-outage-kill-slave mo2's
// slave is SIGKILLed halfway through the outage: mo2 cannot shrink its
// eligible set, so it turns readonly and producers must move to the other
// groups without failing a send; the slave restarts once the meta servers
// are back. With -meta-outage-restart-alone mo1's master is SIGKILLed and
// restarted halfway through: it cannot register while the meta servers are
// down.
//
//	meta_outage_failed_sends          sends that returned an error from the
//	                                  kill to ten seconds after the restart
//	                                  (target 0)
//	meta_outage_consume_stall_ms      the longest time between two consumed
//	                                  messages in that span (target ≤ 1000)
//	meta_outage_group_write_stall_ms  the longest time one group's master
//	                                  stored no message in that span (each
//	                                  master's messages_stored_total, read
//	                                  every 100 ms; mo4's messages_received;
//	                                  without mo2 under -meta-outage-kill-slave,
//	                                  mo1 under -meta-outage-restart-alone)
//	meta_outage_delay_late_ms         the latest delivery of a delayed
//	                                  message due in that span (consumed
//	                                  minus due)
//	meta_outage_role_changes          elections won and demotions in it (0)
//	meta_outage_lost_acked            acknowledged messages never consumed (0)

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/pkg/devetcd"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/producer"
)

var (
	metaOutageFor          = flag.Duration("meta-outage-for", 60*time.Second, "meta-outage: how long the meta servers and etcd stay down")
	metaOutageStop         = flag.String("meta-outage-stop", "all", "meta-outage: what is stopped: all (both meta servers and etcd), meta (the meta servers only) or etcd (etcd only)")
	metaOutageRestartAlone = flag.Bool("meta-outage-restart-alone", false, "meta-outage: also SIGKILL and restart mo1's master (no slave) halfway through the outage")
	metaOutageKillSlave    = flag.Bool("meta-outage-kill-slave", false, "meta-outage: also SIGKILL mo2's slave halfway through the outage (restarted once the meta servers are back)")
)

const (
	moMetaEnv    = "QMQBENCH_OUTAGE_META" // run a meta server child with its data in this directory
	moSpecEnv    = "QMQBENCH_OUTAGE_SPEC" // "tcp http etcd-client etcd-peer" (etcd "-": use moEtcdEnv)
	moEtcdEnv    = "QMQBENCH_OUTAGE_ETCD" // the etcd endpoint of a meta server without its own
	moSubject    = "bench.metaoutage"
	moProducers  = 8
	moDelayed    = 2 // of the producers, sending messages due in moDelayBy
	moDelayBy    = 2 * time.Second
	moSendWithin = 5 * time.Second
)

func init() {
	register("meta-outage", runMetaOutage)
	if dir := os.Getenv(moMetaEnv); dir != "" {
		os.Exit(metaOutageServerMain(dir, strings.Fields(os.Getenv(moSpecEnv)), os.Getenv(moEtcdEnv)))
	}
}

// metaOutageServerMain runs in a child: a meta server on fixed addresses,
// with an embedded etcd on fixed addresses or on etcd's. It prints "ready"
// and serves until its stdin closes or it is killed.
func metaOutageServerMain(dir string, spec []string, etcd string) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "meta server:", err); return 1 }
	if len(spec) != 4 {
		return fail(fmt.Errorf("%s: want 4 addresses, got %q", moSpecEnv, spec))
	}
	o := metaserver.NewOptions()
	o.Addr, o.HTTPAddr, o.AdminToken, o.DataDir = spec[0], spec[1], "bench", dir
	o.MinGroups = 3
	if spec[2] != "-" {
		e, err := devetcd.Start(devetcd.Options{Dir: filepath.Join(dir, "etcd"), ClientAddr: spec[2], PeerAddr: spec[3]}, nil)
		if err != nil {
			return fail(err)
		}
		defer e.Close()
		o.EtcdEndpoints = e.Endpoints()
	} else {
		o.EtcdEndpoints = []string{etcd}
	}
	if spec[0] == "-" { // etcd alone
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	}
	s, err := metaserver.New(o, nil)
	if err != nil {
		return fail(err)
	}
	if err := s.Start(); err != nil {
		return fail(err)
	}
	defer s.Close(context.Background())
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// moMeta is one meta server child; its addresses outlive its processes.
type moMeta struct {
	name, dir string
	spec      []string
	etcd      string
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	done      chan struct{}
}

func (m *moMeta) start() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), moMetaEnv+"="+m.dir, moSpecEnv+"="+strings.Join(m.spec, " "), moEtcdEnv+"="+m.etcd)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if m.stdin, err = cmd.StdinPipe(); err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	m.cmd, m.done = cmd, make(chan struct{})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	go func() { _ = cmd.Wait(); close(m.done) }()
	if err != nil || strings.TrimSpace(line) != "ready" {
		m.kill()
		return fmt.Errorf("meta server %s did not start: %q %v", m.name, line, err)
	}
	return nil
}

// kill sends SIGKILL and waits.
func (m *moMeta) kill() {
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Kill()
	<-m.done
	m.cmd = nil
}

// stop closes stdin (a clean stop) and waits, killing after 10 s.
func (m *moMeta) stop() {
	if m.cmd == nil {
		return
	}
	m.stdin.Close()
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
	m.cmd = nil
}

func runMetaOutage(env *Env) error {
	etcdClient := freeAddr()
	etcd := &moMeta{name: "etcd", dir: filepath.Join(env.Dir, "mo-etcd"), spec: []string{"-", "-", etcdClient, freeAddr()}}
	metaA := &moMeta{name: "A", dir: filepath.Join(env.Dir, "mo-meta-a"), spec: []string{freeAddr(), freeAddr(), "-", "-"}, etcd: etcdClient}
	metaB := &moMeta{name: "B", dir: filepath.Join(env.Dir, "mo-meta-b"), spec: []string{freeAddr(), freeAddr(), "-", "-"}, etcd: etcdClient}
	metas := []string{metaA.spec[0], metaB.spec[0]}
	var down []*moMeta // stopped for the outage, in this order
	switch *metaOutageStop {
	case "all":
		down = []*moMeta{metaB, metaA, etcd}
	case "meta":
		down = []*moMeta{metaB, metaA}
	case "etcd":
		down = []*moMeta{etcd}
	default:
		return fmt.Errorf("-meta-outage-stop %q: want all, meta or etcd", *metaOutageStop)
	}
	defer etcd.stop()
	defer metaA.stop()
	defer metaB.stop()
	for _, m := range []*moMeta{etcd, metaA, metaB} {
		if err := m.start(); err != nil {
			return err
		}
	}
	alone := newGroupNode(env, "mo1-master", "mo1")
	syncM := newGroupNode(env, "mo2-master", "mo2", "--wait-slave")
	syncS := newGroupNode(env, "mo2-slave", "mo2", "--role", "slave", "--wait-slave")
	asyncM := newGroupNode(env, "mo3-master", "mo3")
	asyncS := newGroupNode(env, "mo3-slave", "mo3", "--role", "slave")
	delayM := newGroupNode(env, "mo4-delay", "mo4")
	delayM.kind = "delay"
	nodes := []*groupNode{alone, syncM, syncS, asyncM, asyncS, delayM}
	masters := []*groupNode{alone, syncM, asyncM, delayM}
	defer func() {
		for _, n := range nodes {
			if n.p != nil {
				n.p.stop()
			}
		}
	}()
	for _, n := range masters {
		if err := env.startNode(n, metas); err != nil {
			return err
		}
		if err := waitWritableAlone(n, 30*time.Second); err != nil {
			return err
		}
	}
	for _, n := range []*groupNode{syncS, asyncS, delayM} {
		if err := env.startNode(n, metas); err != nil {
			return err
		}
	}
	if err := waitWritableAlone(delayM, 30*time.Second); err != nil {
		return err
	}
	if err := waitRoles(syncM, syncS, 60*time.Second); err != nil {
		return err
	}
	if err := waitRoles(asyncM, asyncS, 60*time.Second); err != nil {
		return err
	}

	mc, err := metaclient.New(metas, "bench-meta-outage", metaclient.WithRefreshInterval(time.Second))
	if err != nil {
		return err
	}
	defer mc.Close()
	var recvMu sync.Mutex
	received := map[string]time.Time{}
	var recvTimes []time.Time
	c, err := consumer.New(consumer.WithResolver(mc), consumer.WithConsumerID("bench-mo-c1"), consumer.WithRouteRefresh(time.Second))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if _, err := c.Subscribe(moSubject, "bench", func(ctx context.Context, m *consumer.Message) error {
		now := time.Now()
		recvMu.Lock()
		if _, dup := received[m.ID]; !dup {
			received[m.ID] = now
		}
		recvTimes = append(recvTimes, now)
		recvMu.Unlock()
		return nil
	}, consumer.StartEarliest(), consumer.Concurrency(4)); err != nil {
		return err
	}
	ps := make([]*producer.Producer, moProducers)
	for i := range ps {
		if ps[i], err = producer.New(producer.WithResolver(mc), producer.WithSendTimeout(moSendWithin)); err != nil {
			return err
		}
		defer ps[i].Close(context.Background())
	}
	load := startSenders(ps, moSubject, 256, moSendWithin, moDelayed, moDelayBy)
	defer load.halt()

	// Each master's stored count, every 100 ms: the longest time one group
	// stored nothing.
	type sample struct {
		at     time.Time
		stored []float64
	}
	var samplesMu sync.Mutex
	var samples []sample
	sampleStop := make(chan struct{})
	sampleDone := make(chan struct{})
	go func() {
		defer close(sampleDone)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sampleStop:
				return
			case <-t.C:
			}
			s := sample{at: time.Now(), stored: make([]float64, len(masters))}
			for i, n := range masters {
				v, err := n.metric(map[string]string{"realtime": "qmq_realtime_messages_stored_total", "delay": "qmq_delay_messages_received_total"}[n.kind])
				if err != nil {
					v = -1
				}
				s.stored[i] = v
			}
			samplesMu.Lock()
			samples = append(samples, s)
			samplesMu.Unlock()
		}
	}()
	stopSampling := func() {
		select {
		case <-sampleStop:
		default:
			close(sampleStop)
			<-sampleDone
		}
	}
	defer stopSampling()

	roleChanges := func() (float64, error) {
		total := 0.0
		for _, n := range nodes {
			m, err := n.metrics()
			if err != nil {
				return 0, err
			}
			for k, v := range m {
				if strings.HasPrefix(k, "qmq_failover_elections_total{") && strings.Contains(k, `outcome="won"`) {
					total += v
				}
			}
			total += m["qmq_failover_demotions_total"]
		}
		return total, nil
	}
	time.Sleep(5 * time.Second)
	changesBefore, err := roleChanges()
	if err != nil {
		return err
	}
	acked0, failed0 := load.total()
	env.Logf("before the outage: %d acked, %d failed", acked0, failed0)

	outage := time.Now()
	var names []string
	for _, m := range down {
		m.kill()
		names = append(names, m.name)
	}
	env.Logf("%s killed; down for %v", strings.Join(names, ", "), *metaOutageFor)
	killAt := outage.Add(*metaOutageFor / 2)
	restartedAlone := false
	for left := *metaOutageFor; left > 0; left -= 10 * time.Second {
		if wake := outage.Add(*metaOutageFor - left + min(left, 10*time.Second)); *metaOutageKillSlave && syncS.p != nil && !wake.Before(killAt) {
			time.Sleep(time.Until(killAt))
			syncS.p.kill()
			syncS.p = nil
			env.Logf("%s SIGKILLed", syncS.name)
		}
		if wake := outage.Add(*metaOutageFor - left + min(left, 10*time.Second)); *metaOutageRestartAlone && !restartedAlone && !wake.Before(killAt) {
			restartedAlone = true
			time.Sleep(time.Until(killAt))
			alone.p.kill()
			alone.p = nil
			if err := env.startNode(alone, metas); err != nil {
				return err
			}
			env.Logf("%s SIGKILLed and restarted in %v", alone.name, time.Since(killAt).Round(time.Millisecond))
		}
		time.Sleep(time.Until(outage.Add(*metaOutageFor - left + min(left, 10*time.Second))))
		acked, failed := load.total()
		var states []string
		for _, n := range masters {
			m, err := n.metrics()
			if err != nil {
				return err
			}
			states = append(states, fmt.Sprintf("%s %v (%v stored)", n.group, m["qmq_failover_write_state"],
				m["qmq_realtime_messages_stored_total"]+m["qmq_delay_messages_received_total"]))
		}
		env.Logf("%v into the outage: %d acked, %d failed; write states %s", time.Since(outage).Round(time.Second), acked, failed, strings.Join(states, ", "))
	}
	for i := len(down) - 1; i >= 0; i-- {
		if err := down[i].start(); err != nil {
			return err
		}
	}
	restarted := time.Now()
	env.Logf("%s back after %v", strings.Join(names, ", "), restarted.Sub(outage).Round(time.Millisecond))
	if syncS.p == nil {
		if err := env.startNode(syncS, metas); err != nil {
			return err
		}
		if err := waitRoles(syncM, syncS, 60*time.Second); err != nil {
			return err
		}
		env.Logf("%s back as %s's eligible slave %v after the meta servers", syncS.name, syncM.name, time.Since(restarted).Round(time.Millisecond))
	}
	time.Sleep(10 * time.Second)
	end := time.Now()
	changesAfter, err := roleChanges()
	if err != nil {
		return err
	}
	load.halt()
	stopSampling()

	load.mu.Lock()
	failed := 0
	for _, t := range load.failAt {
		if !t.Before(outage) && !t.After(end) {
			failed++
		}
	}
	load.mu.Unlock()
	if failed > 0 {
		env.Logf("failed sends:%s", load.errorSummary())
	}

	recvMu.Lock()
	consumeStall := time.Duration(0)
	prev := outage
	for _, t := range recvTimes {
		if t.Before(outage) {
			continue
		}
		if t.After(end) {
			break
		}
		consumeStall = max(consumeStall, t.Sub(prev))
		prev = t
	}
	consumeStall = max(consumeStall, end.Sub(prev))
	recvMu.Unlock()

	samplesMu.Lock()
	writeStall := time.Duration(0)
	for i, n := range masters {
		if *metaOutageKillSlave && n == syncM || *metaOutageRestartAlone && n == alone {
			continue // readonly while its slave is gone and the set cannot shrink
		}
		last := outage
		var worst time.Duration
		var worstFrom time.Time
		note := func(to time.Time) {
			if d := to.Sub(last); d > worst {
				worst, worstFrom = d, last
			}
		}
		for j, s := range samples {
			if s.at.Before(outage) || j == 0 {
				continue
			}
			if s.at.After(end) {
				break
			}
			if s.stored[i] > samples[j-1].stored[i] {
				note(s.at)
				last = s.at
			}
		}
		note(end)
		env.Logf("%s: longest time storing nothing %v, from %v after the kill (the restart was at %v)", n.group,
			worst.Round(time.Millisecond), worstFrom.Sub(outage).Round(time.Millisecond), restarted.Sub(outage).Round(time.Millisecond))
		writeStall = max(writeStall, worst)
	}
	samplesMu.Unlock()

	lost := 0
	ids := load.ackedIDs()
	err = waitFor(60*time.Second, "every acknowledged message consumed", func() error {
		recvMu.Lock()
		defer recvMu.Unlock()
		lost = 0
		for _, id := range ids {
			if _, ok := received[id]; !ok {
				lost++
			}
		}
		if lost > 0 {
			return fmt.Errorf("%d of %d not consumed", lost, len(ids))
		}
		return nil
	})
	if err != nil {
		env.Logf("%v", err)
	}
	late := time.Duration(0)
	recvMu.Lock()
	load.mu.Lock()
	for id, due := range load.due {
		if at, ok := received[id]; ok && !due.Before(outage) && !due.After(end) {
			late = max(late, at.Sub(due))
		}
	}
	delayed := len(load.due)
	load.mu.Unlock()
	recvMu.Unlock()
	env.Logf("%d messages acknowledged in all (%d delayed), %d sends failed in all", len(ids), delayed, load.fails)
	env.Metric("meta_outage_failed_sends", float64(failed), "sends")
	env.Metric("meta_outage_consume_stall_ms", float64(consumeStall.Milliseconds()), "ms")
	env.Metric("meta_outage_group_write_stall_ms", float64(writeStall.Milliseconds()), "ms")
	env.Metric("meta_outage_delay_late_ms", float64(late.Milliseconds()), "ms")
	env.Metric("meta_outage_role_changes", changesAfter-changesBefore, "changes")
	env.Metric("meta_outage_lost_acked", float64(lost), "messages")
	return nil
}

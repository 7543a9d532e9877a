package delay_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/delay/store"
	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/devetcd"
	"github.com/qmq-go/qmq/pkg/failover"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/pkg/transport"
	"github.com/qmq-go/qmq/producer"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// The failover test: a delay group of two child processes (this test
// binary re-executed, running TestDelayFailoverChild) — a master with
// --wait-slave and a slave — registered with an in-process meta server on
// an embedded etcd. Delayed messages due over the next seconds are sent;
// the master is SIGKILLed once it has forwarded a third of them; its
// registration expires, the slave wins the group's election, promotes its
// copy and forwards every message not marked dispatched when due: all are
// delivered once (the realtime broker drops re-forwards by id), none early.
// The old master, restarted on its directory, finds another master and
// rejoins as its slave: it keeps what it shares with the new master's
// store (which was promoted from its copy) and copies the rest.
//
// Short: 60 messages due 2–6 s after the first send.
// QMQ_DELAY_FAILOVER_LONG=1: 600 due 2–21 s after it.

const failoverChildRole = "delay-failover-child"

// TestDelayFailoverChild is the child: it serves a delay server until killed.
func TestDelayFailoverChild(t *testing.T) {
	if testutil.ChildRole() != failoverChildRole {
		t.Skip("runs only as the failover test's child process")
	}
	o := delay.NewOptions()
	o.Addr, o.HTTPAddr, o.DataDir = os.Getenv("QMQ_DL_FO_ADDR"), os.Getenv("QMQ_DL_FO_HTTP"), os.Getenv("QMQ_DL_FO_DIR")
	o.Realtime = []string{os.Getenv("QMQ_DL_FO_REALTIME")}
	if meta := os.Getenv("QMQ_DL_FO_META"); meta != "" {
		o.MetaServers = []string{meta}
	}
	o.Role, o.Master = os.Getenv("QMQ_DL_FO_ROLE"), os.Getenv("QMQ_DL_FO_MASTER")
	if n, err := strconv.Atoi(os.Getenv("QMQ_DL_FO_SYNC_MAX")); err == nil {
		o.SyncMaxBytes = n
	}
	o.WaitSlave = os.Getenv("QMQ_DL_FO_WAIT_SLAVE") == "1"
	o.SyncWait = 300 * time.Millisecond
	lg, _ := zap.NewDevelopment(zap.IncreaseLevel(zap.InfoLevel))
	s, err := delay.New(o, nil, nil, lg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open:", err)
		os.Exit(3)
	}
	if err := s.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "child: start:", err)
		os.Exit(3)
	}
	fmt.Println("ready")
	select {} // until SIGKILL
}

type failoverChild struct {
	name, httpAddr string
	cmd            *exec.Cmd
	log            *lockedBuffer
	done           chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startFailoverChild(t *testing.T, name, dir, addr, httpAddr, role string, waitSlave bool, meta, realtimeAddr string, env ...string) *failoverChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDelayFailoverChild$", "-test.v")
	ws := "0"
	if waitSlave {
		ws = "1"
	}
	cmd.Env = append(os.Environ(), testutil.ChildEnv+"="+failoverChildRole, "QMQ_DL_FO_DIR="+dir, "QMQ_DL_FO_ADDR="+addr,
		"QMQ_DL_FO_HTTP="+httpAddr, "QMQ_DL_FO_ROLE="+role, "QMQ_DL_FO_WAIT_SLAVE="+ws, "QMQ_DL_FO_META="+meta,
		"QMQ_DL_FO_REALTIME="+realtimeAddr)
	cmd.Env = append(cmd.Env, env...)
	c := &failoverChild{name: name, httpAddr: httpAddr, cmd: cmd, log: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = c.log
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if !ok && sc.Text() == "ready" {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
		cmd.Wait()
		close(c.done)
	}()
	select {
	case ok := <-ready:
		if !ok {
			<-c.done
			t.Fatalf("%s exited before ready: %s", name, c.log.String())
		}
	case <-time.After(30 * time.Second):
		c.kill()
		t.Fatalf("%s not ready after 30s: %s", name, c.log.String())
	}
	t.Cleanup(func() {
		c.kill()
		if strings.Contains(c.log.String(), "WARNING: DATA RACE") {
			t.Errorf("%s: data race", name)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, c.log.String())
		}
	})
	return c
}

func (c *failoverChild) kill() {
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// gauge reads a qmq_delay_ series from the child's /metrics.
func (c *failoverChild) gauge(name string) (float64, error) {
	v, err := gaugeAt(c.httpAddr, name)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", c.name, err)
	}
	return v, nil
}

// gaugeAt reads a series from the /metrics of the server at httpAddr.
func gaugeAt(httpAddr, name string) (float64, error) {
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name+"{"); ok {
			var v float64
			if _, err := fmt.Sscan(rest[strings.LastIndexByte(rest, ' ')+1:], &v); err == nil {
				return v, nil
			}
		}
	}
	return 0, fmt.Errorf("no %s in /metrics", name)
}

// waitGauge polls until the child's series has value want.
func (c *failoverChild) waitGauge(t *testing.T, timeout time.Duration, name string, want float64) {
	t.Helper()
	testutil.CheckFor(t, timeout, 50*time.Millisecond, func() error {
		v, err := c.gauge(name)
		if err != nil {
			return err
		}
		if v != want {
			return fmt.Errorf("%s: %s is %v, want %v", c.name, name, v, want)
		}
		return nil
	})
}

func TestDelay_FailoverDeliversEverythingNeverEarly(t *testing.T) {
	t.Parallel()
	n, spread := 60, 4*time.Second
	if os.Getenv("QMQ_DELAY_FAILOVER_LONG") == "1" {
		n, spread = 600, 19*time.Second
	}
	ms := startMetaServer(t, func(o *metaserver.Options) { o.BrokerTTL = 2 * time.Second })
	meta := ms.Addr().String()

	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	var (
		mu    sync.Mutex
		got   = map[string]int{}
		early atomic.Int64
	)
	c, err := consumer.New(consumer.WithBrokers(rtAddr), consumer.WithConsumerID("failover"), consumer.WithTransportOptions(fastTransport))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Subscribe("failover", "g", func(ctx context.Context, m *consumer.Message) error {
		if time.Now().Before(m.DeliverAt) {
			early.Add(1)
		}
		mu.Lock()
		got[m.ID]++
		mu.Unlock()
		return nil
	}, consumer.StartEarliest(), consumer.Concurrency(4)); err != nil {
		t.Fatal(err)
	}

	aDir, bDir := t.TempDir(), t.TempDir()
	aAddr, aHTTP, bAddr, bHTTP := testutil.ReusableAddr(t), testutil.ReusableAddr(t), testutil.ReusableAddr(t), testutil.ReusableAddr(t)
	a := startFailoverChild(t, "A (master)", aDir, aAddr, aHTTP, delay.RoleMaster, true, meta, rtAddr)
	a.waitGauge(t, 20*time.Second, "qmq_delay_fenced", 0)
	b := startFailoverChild(t, "B (slave)", bDir, bAddr, bHTTP, delay.RoleSlave, false, meta, rtAddr)
	b.waitGauge(t, 20*time.Second, "qmq_delay_role", 2)
	// Replies wait for B once A records it as the eligible slave.
	a.waitGauge(t, 20*time.Second, "qmq_failover_eligible_slave", 1)

	mc, err := metaclient.New([]string{meta}, "failover-test", metaclient.WithRefreshInterval(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	p, err := producer.New(producer.WithResolver(mc), producer.WithTransportOptions(fastTransport), producer.WithSendTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())

	// Messages fall due from 2 s after their send, over spread.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	offsets := make([]time.Duration, n)
	for i := range offsets {
		offsets[i] = 2*time.Second + time.Duration(rng.Int64N(int64(spread)))
	}
	ids := make([]string, n)
	for i := range n {
		m := &producer.Message{Subject: "failover", Body: fmt.Appendf(nil, "m%d", i), DeliverAt: time.Now().Add(offsets[i])}
		if err := p.Send(context.Background(), m); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		ids[i] = m.ID
	}
	// --wait-slave: every acknowledged message is on B already.
	if v, err := b.gauge("qmq_delay_messages_pending"); err != nil || v != float64(n) {
		t.Fatalf("slave holds %v pending after %d acknowledged sends (%v)", v, n, err)
	}
	// Kill A once it has forwarded a third: some of its last forwards are
	// not marked on B yet, and B forwards them again (the realtime broker
	// drops those copies by id); the rest are pending.
	delivered := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	testutil.CheckFor(t, 10*time.Second+spread, 5*time.Millisecond, func() error {
		if d := delivered(); d < n/3 {
			return fmt.Errorf("%d of %d delivered", d, n)
		}
		return nil
	})
	a.kill()
	atKill := delivered()
	t.Logf("A killed with %d of %d delivered", atKill, n)
	killed := time.Now()
	b.waitGauge(t, 20*time.Second, "qmq_delay_role", 1)
	t.Logf("B promoted %v after A was killed", time.Since(killed).Round(time.Millisecond))

	testutil.CheckFor(t, 30*time.Second+spread, 50*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		missing := 0
		for _, id := range ids {
			if got[id] == 0 {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d messages not delivered", missing, n)
		}
		return nil
	})
	if v := early.Load(); v > 0 {
		t.Errorf("%d deliveries before their due time", v)
	}
	mu.Lock()
	dups := 0
	for _, id := range ids {
		dups += got[id] - 1
	}
	mu.Unlock()
	if dups > 0 {
		t.Errorf("%d duplicate deliveries", dups)
	}
	if fw, err := b.gauge("qmq_delay_messages_forwarded_total"); err == nil {
		t.Logf("B forwarded %v messages; %d were left when A died: %v forwarded again (dropped by the realtime broker's dedupe)",
			fw, n-atKill, fw-float64(n-atKill))
	}

	// A rejoins as B's slave: it finds B holding the group, keeps what the
	// two stores share, drops the rest and copies B's newer bytes: it ends
	// with B's pending messages, not A's old ones.
	later := make([]string, 0, 5)
	for i := range 5 {
		m := &producer.Message{Subject: "failover", Body: fmt.Appendf(nil, "later%d", i), DeliverAt: time.Now().Add(time.Hour)}
		if err := p.Send(context.Background(), m); err != nil {
			t.Fatalf("send to the new master: %v", err)
		}
		later = append(later, m.ID)
	}
	b.waitGauge(t, 10*time.Second, "qmq_delay_messages_pending", 5)
	a = startFailoverChild(t, "A (rejoining)", aDir, aAddr, aHTTP, delay.RoleMaster, true, meta, rtAddr)
	a.waitGauge(t, 20*time.Second, "qmq_delay_role", 2)
	a.waitGauge(t, 20*time.Second, "qmq_delay_messages_pending", 5)
	// B's store was promoted from A's: A kept the bytes they share instead
	// of copying everything again.
	if !strings.Contains(a.log.String(), "rejoined: kept what this directory shares") {
		t.Errorf("A did not keep what it shares with B's store:\n%s", a.log.String())
	}
	t.Logf("%d messages delivered after the failover, none early, no duplicate; A rejoined as the slave", n)
}

// The meta server goes away (pkg/failover, async mode). A master whose
// group has no eligible slave keeps taking sends and forwarding: nobody
// else can be elected. Once a slave copies it and is eligible, the master
// writes under its meta lease or its slave lease: with the meta server gone
// and the slave stopped too, both run out and it is fenced (no send taken,
// nothing forwarded); when the meta server is back it drops the slave from
// the eligible set and serves alone again. A message due while it was
// fenced is forwarded after, never early.
func TestDelay_MasterFencesOnlyWhereARivalCanExist(t *testing.T) {
	t.Parallel()
	e, err := devetcd.Start(devetcd.Options{Dir: t.TempDir(), Fast: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	const ttl = 2 * time.Second
	metaAddr := testutil.ReusableAddr(t)
	startMeta := func() *metaserver.Server {
		mo := metaserver.NewOptions()
		mo.Addr, mo.HTTPAddr, mo.EtcdEndpoints, mo.BrokerTTL = metaAddr, "127.0.0.1:0", e.Endpoints(), ttl
		ms, err := metaserver.New(mo, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
		if err != nil {
			t.Fatal(err)
		}
		if err := ms.Start(); err != nil {
			t.Fatal(err)
		}
		return ms
	}
	ms := startMeta()

	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	mu, got := subscribe(t, rtAddr, "repl")
	opts := func(role string) delay.Options {
		o := delay.NewOptions()
		o.Addr, o.HTTPAddr, o.DataDir, o.Realtime, o.MetaServers = "127.0.0.1:0", "", t.TempDir(), []string{rtAddr}, []string{metaAddr}
		o.Role, o.SyncWait = role, 200*time.Millisecond
		return o
	}
	m := startDelayWith(t, opts(delay.RoleMaster))
	testutil.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if r := m.Replication(); r.Fenced || r.Epoch == 0 || r.WriteState != protocol.WriteAlone {
			return fmt.Errorf("master not registered alone: %+v", r)
		}
		return nil
	})
	p, err := producer.New(producer.WithResolver(route.NewStatic(route.Groups(rtAddr), route.Groups(m.Addr().String()))),
		producer.WithTransportOptions(fastTransport), producer.WithSendTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	delivered := func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got[id]) > 0
	}

	// 1. No slave: the meta server goes, sends and forwards go on past the
	// lease.
	ms.Close(context.Background())
	alone := sendDelayed(t, p, "alone", 1, time.Now().Add(ttl+time.Second))[0]
	testutil.CheckFor(t, 3*ttl+5*time.Second, 50*time.Millisecond, func() error {
		if !delivered(alone) {
			return errors.New("not forwarded yet")
		}
		return nil
	})
	if r := m.Replication(); r.Fenced || r.WriteState != protocol.WriteAlone {
		t.Fatalf("a master without a slave, meta server gone: %+v", r)
	}
	sendDelayed(t, p, "alone-after", 1, time.Now().Add(time.Hour))

	// 2. A slave copies and becomes eligible.
	ms = startMeta()
	sl := startDelayWith(t, opts(delay.RoleSlave))
	testutil.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if r := m.Replication(); r.WriteState != protocol.WriteWritable {
			return fmt.Errorf("master with a slave: %+v", r)
		}
		return nil
	})
	// Due after the fence: the slave lease (4 s) runs out within it.
	due := time.Now().Add(7 * time.Second)
	id := sendDelayed(t, p, "fenced", 1, due)[0]
	testutil.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := sl.Stats().Pending; n < 2 {
			return fmt.Errorf("slave holds %d pending", n)
		}
		return nil
	})

	// 3. The meta server and the slave go: both leases run out.
	testutil.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if r := m.Replication(); r.WriteState != protocol.WriteWritable {
			return fmt.Errorf("master with its slave eligible: %+v", r)
		}
		return nil
	})
	ms.Close(context.Background())
	stopped := time.Now()
	sl.Close(context.Background())
	testutil.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if r := m.Replication(); !r.Fenced {
			return fmt.Errorf("master not fenced: %+v", r)
		}
		return nil
	})
	t.Logf("fenced %v after the meta server and the slave stopped", time.Since(stopped).Round(time.Millisecond))
	c, err := transport.New(fastTransport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg, _ := protocol.AppendMessage(nil, &protocol.Message{Subject: "repl", ID: "while-fenced", Body: []byte("x"), DeliverAt: time.Now().Add(time.Hour)}, protocol.DefaultLimits)
	if _, err := c.Call(context.Background(), m.Addr().String(), protocol.CmdSend, protocol.AppendSendRequest(nil, 0, [][]byte{msg})); !errors.Is(err, protocol.ErrNotMaster) {
		t.Fatalf("send to a fenced master: %v, want StatusNotMaster", err)
	}
	time.Sleep(time.Until(due.Add(time.Second)))
	if delivered(id) {
		t.Fatal("a fenced master forwarded a due message")
	}

	// 4. The meta server is back: the master drops its gone slave from the
	// eligible set and serves alone; the due message is forwarded, late.
	ms = startMeta()
	t.Cleanup(func() { ms.Close(context.Background()) })
	testutil.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if r := m.Replication(); r.Fenced || r.WriteState != protocol.WriteAlone {
			return fmt.Errorf("master after the meta server came back: %+v", r)
		}
		if !delivered(id) {
			return errors.New("message not delivered after the fence lifted")
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if r := got[id][0]; r.at.Before(r.deliverAt) {
		t.Fatalf("delivered %v early", r.deliverAt.Sub(r.at))
	}
}

// A planned switchover (CmdSwitchover, as the meta server relays it): the
// master waits until its slave holds everything, unregisters and rejoins
// as the slave; the slave wins the group and forwards every pending
// message when due.
func TestDelay_Switchover(t *testing.T) {
	t.Parallel()
	ms := startMetaServer(t, func(o *metaserver.Options) { o.BrokerTTL = 2 * time.Second })
	meta := []string{ms.Addr().String()}
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	mu, got := subscribe(t, rtAddr, "repl")

	opts := func(role string) delay.Options {
		o := delay.NewOptions()
		o.Addr, o.HTTPAddr, o.DataDir, o.Realtime, o.MetaServers = "127.0.0.1:0", "", t.TempDir(), []string{rtAddr}, meta
		o.Role, o.SyncWait = role, 200*time.Millisecond
		return o
	}
	a := startDelayWith(t, opts(delay.RoleMaster))
	testutil.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if r := a.Replication(); r.Fenced || r.Epoch == 0 {
			return fmt.Errorf("master not registered: %+v", r)
		}
		return nil
	})
	b := startDelayWith(t, opts(delay.RoleSlave))
	p, err := producer.New(producer.WithResolver(route.NewStatic(route.Groups(rtAddr), route.Groups(a.Addr().String()))),
		producer.WithTransportOptions(fastTransport))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	// Due late enough that the slave holds them pending (not forwarded yet)
	// however loaded the machine.
	ids := sendDelayed(t, p, "sw", 20, time.Now().Add(6*time.Second))
	epochA := a.Replication().Epoch
	testutil.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := b.Stats().Pending; n != 20 {
			return fmt.Errorf("slave holds %d pending", n)
		}
		return nil
	})

	c, err := transport.New(fastTransport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sw := func(epoch uint64) error {
		_, err := c.Call(context.Background(), a.Addr().String(), protocol.CmdSwitchover,
			protocol.AppendSwitchoverRequest(nil, &protocol.SwitchoverRequest{Group: "dl1", Epoch: epoch, Timeout: 5 * time.Second}))
		return err
	}
	if err := sw(epochA + 1); !errors.Is(err, protocol.ErrNotMaster) {
		t.Fatalf("switchover naming a newer epoch: %v, want StatusNotMaster", err)
	}
	if err := sw(epochA); err != nil {
		t.Fatalf("switchover: %v", err)
	}
	testutil.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		if ra, rb := a.Replication(), b.Replication(); ra.Role != delay.RoleSlave || rb.Role != delay.RoleMaster || rb.Fenced || rb.Epoch <= epochA {
			return fmt.Errorf("after the switchover: A %+v, B %+v", ra, rb)
		}
		return nil
	})
	testutil.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if len(got[id]) == 0 {
				return fmt.Errorf("message %s not delivered", id)
			}
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		for _, r := range got[id] {
			if r.at.Before(r.deliverAt) {
				t.Fatalf("message %s delivered %v early", id, r.deliverAt.Sub(r.at))
			}
		}
		if len(got[id]) != 1 {
			t.Fatalf("message %s delivered %d times", id, len(got[id]))
		}
	}
}

// A slave that won its group (a campaign stops its copy first) and is
// later deposed copies again: after a switchover there and back, the first
// slave holds what its old master takes.
func TestDelay_SwitchoverThereAndBack(t *testing.T) {
	t.Parallel()
	ms := startMetaServer(t, func(o *metaserver.Options) { o.BrokerTTL = 2 * time.Second })
	meta := []string{ms.Addr().String()}
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	opts := func(role string) delay.Options {
		o := delay.NewOptions()
		o.Addr, o.HTTPAddr, o.DataDir, o.Realtime, o.MetaServers = "127.0.0.1:0", "", t.TempDir(), []string{rtAddr}, meta
		o.Role, o.SyncWait = role, 200*time.Millisecond
		return o
	}
	a := startDelayWith(t, opts(delay.RoleMaster))
	testutil.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if r := a.Replication(); r.Fenced || r.Epoch == 0 {
			return fmt.Errorf("master not registered: %+v", r)
		}
		return nil
	})
	b := startDelayWith(t, opts(delay.RoleSlave))
	c, err := transport.New(fastTransport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	holds := func(master, slave *delay.Server, want int64) {
		t.Helper()
		testutil.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
			if n, m := slave.Stats().Pending, master.Stats().Pending; n != want || m != want {
				return fmt.Errorf("master holds %d pending, slave %d, want %d", m, n, want)
			}
			return nil
		})
	}
	send := func(to *delay.Server, prefix string) {
		t.Helper()
		p, err := producer.New(producer.WithResolver(route.NewStatic(route.Groups(rtAddr), route.Groups(to.Addr().String()))),
			producer.WithTransportOptions(fastTransport))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(context.Background())
		sendDelayed(t, p, prefix, 10, time.Now().Add(time.Hour))
	}
	switchover := func(from, to *delay.Server) {
		t.Helper()
		epoch := from.Replication().Epoch
		if _, err := c.Call(context.Background(), from.Addr().String(), protocol.CmdSwitchover,
			protocol.AppendSwitchoverRequest(nil, &protocol.SwitchoverRequest{Group: "dl1", Epoch: epoch, Timeout: 5 * time.Second})); err != nil {
			t.Fatalf("switchover: %v", err)
		}
		testutil.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
			if rf, rt := from.Replication(), to.Replication(); rf.Role != delay.RoleSlave || rt.Role != delay.RoleMaster || rt.Fenced || rt.Epoch <= epoch {
				return fmt.Errorf("after the switchover: old %+v, new %+v", rf, rt)
			}
			return nil
		})
	}
	send(a, "there")
	holds(a, b, 10)
	switchover(a, b)
	send(b, "back")
	holds(b, a, 20)
	switchover(b, a) // B won by a campaign: deposed now, it must copy again
	send(a, "again")
	holds(a, b, 30)
}

// A slave SIGKILLed while it catches up from empty, and restarted, ends with
// an exact copy: its files are cut at their last whole record, it copies
// the rest, and the copy opens as a master's store holding every hour with
// the master's record counts and pending messages.
func TestDelay_SlaveKilledWhileCopying(t *testing.T) {
	t.Parallel()
	n := 6000
	if testing.Short() {
		n = 2000
	}
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	m := startDelay(t, t.TempDir(), "127.0.0.1:0", rtAddr)
	p, err := producer.New(producer.WithResolver(route.NewStatic(route.Groups(rtAddr), route.Groups(m.Addr().String()))),
		producer.WithTransportOptions(fastTransport))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	var wg sync.WaitGroup
	var failed atomic.Int64
	body := make([]byte, 200)
	for i := range n {
		wg.Add(1)
		// Spread over 40 hours: 40 schedule files.
		due := time.Now().Add(time.Hour + time.Duration(i%40)*time.Hour)
		if err := p.SendAsync(&producer.Message{Subject: "copy", Body: body, DeliverAt: due}, func(_ *producer.Message, err error) {
			if err != nil {
				failed.Add(1)
			}
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d sends failed", failed.Load())
	}

	dir, addr, httpAddr := t.TempDir(), testutil.ReusableAddr(t), testutil.ReusableAddr(t)
	env := []string{"QMQ_DL_FO_MASTER=" + m.Addr().String(), "QMQ_DL_FO_SYNC_MAX=2048"} // many small reads
	sl := startFailoverChild(t, "slave", dir, addr, httpAddr, delay.RoleSlave, false, "", rtAddr, env...)
	testutil.CheckFor(t, 20*time.Second, time.Millisecond, func() error {
		v, err := sl.gauge("qmq_delay_messages_pending")
		if err != nil || v == 0 {
			return fmt.Errorf("copy not started (%v)", err)
		}
		return nil
	})
	sl.kill()
	after, _ := store.OpenReplica(dir, nil)
	copied := after.Pending()
	after.Close()
	if copied >= int64(n) {
		t.Logf("the slave had copied everything (%d) when killed: the restart only checks the copy", copied)
	} else {
		t.Logf("slave killed with %d of %d messages copied", copied, n)
	}
	sl = startFailoverChild(t, "slave (restarted)", dir, addr, httpAddr, delay.RoleSlave, false, "", rtAddr, env...)
	sl.waitGauge(t, 30*time.Second, "qmq_delay_messages_pending", float64(n))
	sl.kill()

	// The copy, opened as a master's store, holds what the master holds.
	st, err := store.Open(dir, store.Options{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	want, got := m.Stats(), st.Stats()
	if got.Pending != int64(n) || len(got.Hours) != len(want.Hours) {
		t.Fatalf("promoted copy: %d pending in %d hours; master: %d in %d", got.Pending, len(got.Hours), want.Pending, len(want.Hours))
	}
	for i := range want.Hours {
		if got.Hours[i].Hour != want.Hours[i].Hour || got.Hours[i].Records != want.Hours[i].Records {
			t.Fatalf("hour %d: copy %+v, master %+v", i, got.Hours[i], want.Hours[i])
		}
	}
}

// Repeated failovers under load (QMQ_DELAY_FAILOVER_LONG=1): two child
// processes take turns as master — the master is SIGKILLed, the slave wins,
// the killed one restarts and rejoins as the slave — while a producer keeps
// sending delayed messages through the meta server. Every acknowledged
// message reaches the consumer group, none before its due time.
func TestDelay_RepeatedFailovers(t *testing.T) {
	if os.Getenv("QMQ_DELAY_FAILOVER_LONG") != "1" {
		t.Skip("long: QMQ_DELAY_FAILOVER_LONG=1")
	}
	const cycles = 4
	ms := startMetaServer(t, func(o *metaserver.Options) { o.BrokerTTL = 2 * time.Second })
	meta := ms.Addr().String()
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	var (
		mu    sync.Mutex
		got   = map[string]int{}
		early atomic.Int64
	)
	c, err := consumer.New(consumer.WithBrokers(rtAddr), consumer.WithConsumerID("cycles"), consumer.WithTransportOptions(fastTransport))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Subscribe("cycles", "g", func(ctx context.Context, m *consumer.Message) error {
		if time.Now().Before(m.DeliverAt) {
			early.Add(1)
		}
		mu.Lock()
		got[m.ID]++
		mu.Unlock()
		return nil
	}, consumer.StartEarliest(), consumer.Concurrency(4)); err != nil {
		t.Fatal(err)
	}

	type node struct {
		name, dir, addr, http string
		child                 *failoverChild
	}
	nodes := [2]*node{{name: "A", dir: t.TempDir(), addr: testutil.ReusableAddr(t), http: testutil.ReusableAddr(t)}, {name: "B", dir: t.TempDir(), addr: testutil.ReusableAddr(t), http: testutil.ReusableAddr(t)}}
	nodes[0].child = startFailoverChild(t, "A", nodes[0].dir, nodes[0].addr, nodes[0].http, delay.RoleMaster, true, meta, rtAddr)
	nodes[0].child.waitGauge(t, 20*time.Second, "qmq_delay_fenced", 0)
	nodes[1].child = startFailoverChild(t, "B", nodes[1].dir, nodes[1].addr, nodes[1].http, delay.RoleSlave, true, meta, rtAddr)
	nodes[1].child.waitGauge(t, 20*time.Second, "qmq_delay_role", 2)

	mc, err := metaclient.New([]string{meta}, "cycles-test", metaclient.WithRefreshInterval(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	p, err := producer.New(producer.WithResolver(mc), producer.WithTransportOptions(fastTransport), producer.WithSendTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var acked sync.Map
	var ackCount, failed atomic.Int64
	stop := make(chan struct{})
	sent := make(chan struct{})
	go func() { // sendLoop: about 200 messages a second, due 1–6 s ahead
		defer close(sent)
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for range 2 {
				m := &producer.Message{Subject: "cycles", Body: fmt.Appendf(nil, "m%d", i),
					DeliverAt: time.Now().Add(time.Second + time.Duration(rng.Int64N(int64(5*time.Second))))}
				if err := p.SendAsync(m, func(m *producer.Message, err error) {
					if err != nil {
						failed.Add(1)
						return
					}
					acked.Store(m.ID, struct{}{})
					ackCount.Add(1)
				}); err != nil {
					return
				}
			}
		}
	}()

	master, slave := nodes[0], nodes[1]
	for k := range cycles {
		time.Sleep(3 * time.Second)
		// The slave holds everything acknowledged (--wait-slave); kill the master.
		master.child.kill()
		killed := time.Now()
		slave.child.waitGauge(t, 20*time.Second, "qmq_delay_role", 1)
		t.Logf("cycle %d: %s promoted %v after %s was killed; %d acknowledged so far", k+1, slave.name,
			time.Since(killed).Round(time.Millisecond), master.name, ackCount.Load())
		master.child = startFailoverChild(t, master.name, master.dir, master.addr, master.http, delay.RoleSlave, true, meta, rtAddr)
		master.child.waitGauge(t, 20*time.Second, "qmq_delay_role", 2)
		master, slave = slave, master
	}
	time.Sleep(2 * time.Second)
	close(stop)
	<-sent
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var ids []string
	acked.Range(func(k, _ any) bool { ids = append(ids, k.(string)); return true })
	if len(ids) == 0 {
		t.Fatal("no send acknowledged")
	}
	testutil.CheckFor(t, 60*time.Second, 100*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		missing := 0
		for _, id := range ids {
			if got[id] == 0 {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d acknowledged messages not delivered", missing, len(ids))
		}
		return nil
	})
	if n := early.Load(); n > 0 {
		t.Errorf("%d deliveries before their due time", n)
	}
	mu.Lock()
	dups := 0
	for _, n := range got {
		dups += n - 1
	}
	mu.Unlock()
	t.Logf("%d failovers: %d acknowledged, all delivered, none early; %d sends not acknowledged (the producer was told); %d duplicate deliveries",
		cycles, len(ids), failed.Load(), dups)
}

// What operators see through the meta server: a --wait-slave master
// without a slave serves alone (read-write: nobody else can be elected);
// once a slave has caught up it is the eligible slave and the group lists
// it, its epoch and its lag. Under the readonly slave-down policy the
// master turns readonly when that slave is gone (producers go elsewhere)
// and read-write again once it is back.
func TestDelay_ReadonlyOnLagThroughTheMetaServer(t *testing.T) {
	t.Parallel()
	ms := startMetaServer(t, func(o *metaserver.Options) { o.BrokerTTL, o.AdminToken = 2*time.Second, "t" })
	meta := []string{ms.Addr().String()}
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	opts := func(role, dir string) delay.Options {
		o := delay.NewOptions()
		o.Addr, o.HTTPAddr, o.DataDir, o.Realtime, o.MetaServers = "127.0.0.1:0", "", dir, []string{rtAddr}, meta
		o.Role, o.WaitSlave, o.SyncWait = role, true, 200*time.Millisecond
		o.SlaveDown = failover.SlaveDownReadonly
		return o
	}
	m := startDelayWith(t, opts(delay.RoleMaster, t.TempDir()))
	p, err := producer.New(producer.WithResolver(route.NewStatic(route.Groups(rtAddr), route.Groups(m.Addr().String()))),
		producer.WithTransportOptions(fastTransport), producer.WithSendTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	send := func(body string) error {
		return p.Send(context.Background(), &producer.Message{Subject: "lag", Body: []byte(body), DeliverAt: time.Now().Add(time.Hour)})
	}
	admin := api.NewClient(ms.HTTPAddr().String(), "t", 5*time.Second)
	group := func() (api.Group, error) {
		gs, err := admin.Groups(context.Background())
		if err != nil {
			return api.Group{}, err
		}
		for _, g := range gs {
			if g.Name == "dl1" {
				return g, nil
			}
		}
		return api.Group{}, errors.New("delay group dl1 not listed")
	}
	waitGroup := func(what string, ok func(api.Group) bool) {
		t.Helper()
		testutil.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
			g, err := group()
			if err != nil {
				return err
			}
			if !ok(g) {
				return fmt.Errorf("group %+v, want %s", g, what)
			}
			return nil
		})
	}
	testutil.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error { return send("alone") })
	waitGroup("read-write, alone", func(g api.Group) bool { return g.State == "rw" && g.WriteState == "alone" })

	sdir := t.TempDir()
	sl := startDelayWith(t, opts(delay.RoleSlave, sdir))
	waitGroup("read-write with an eligible slave at the master's epoch and its lag", func(g api.Group) bool {
		return g.State == "rw" && g.Slave != "" && g.Lag != nil && g.SlaveEpoch == g.Epoch && g.Epoch != 0 && g.Eligible == g.SlaveID &&
			g.WriteState == "writable"
	})
	if err := send("with the slave"); err != nil {
		t.Fatalf("send with an eligible slave: %v", err)
	}
	sl.Close(context.Background())
	waitGroup("readonly: its eligible slave is gone", func(g api.Group) bool { return g.State == "readonly" && g.WriteState == "readonly" })
	if err := send("without"); err == nil {
		t.Fatal("a readonly master took a send")
	}
	startDelayWith(t, opts(delay.RoleSlave, sdir))
	waitGroup("read-write again", func(g api.Group) bool { return g.State == "rw" && g.WriteState == "writable" })
	if err := send("back"); err != nil {
		t.Fatalf("send once the slave is back: %v", err)
	}
}

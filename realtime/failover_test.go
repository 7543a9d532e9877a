package realtime_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/pkg/devetcd"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/pkg/transport"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"
	"github.com/qmq-go/qmq/realtime/store"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// The failover tests run a broker group of two child processes (this test
// binary re-executed, running TestFailoverChild: a realtime.Broker under
// its group's role loop, as qmq-realtime does) registered with an
// in-process meta server on an embedded etcd, and kill them with SIGKILL.

const (
	failoverChildRole = "realtime-failover-child"
	failoverGroup     = "fo"
	failoverTTL       = 3 * time.Second
)

// TestFailoverChild is the child: a Broker serving until SIGKILL or SIGTERM.
func TestFailoverChild(t *testing.T) {
	if testutil.ChildRole() != failoverChildRole {
		t.Skip("runs only as the failover tests' child process")
	}
	o := realtime.NewOptions()
	o.Group = failoverGroup
	o.Addr, o.HTTPAddr, o.DataDir = os.Getenv("QMQ_RT_FO_ADDR"), os.Getenv("QMQ_RT_FO_HTTP"), os.Getenv("QMQ_RT_FO_DIR")
	o.MetaServers = []string{os.Getenv("QMQ_RT_FO_META")}
	o.Role = os.Getenv("QMQ_RT_FO_ROLE")
	o.WaitSlave = true
	o.SegmentSize, o.MaxBody = replSegment, replMaxBody
	o.SyncWait = 300 * time.Millisecond
	if d, err := time.ParseDuration(os.Getenv("QMQ_RT_FO_LAG_READONLY")); err == nil {
		o.SlaveLagReadonly = d
	}
	lg, _ := zap.NewDevelopment(zap.IncreaseLevel(zap.InfoLevel))
	n, err := realtime.New(o, lg)
	if err == nil {
		err = n.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child: close:", err)
		os.Exit(4)
	}
	os.Exit(0)
}

// startFailoverMeta starts etcd and a meta server whose broker leases live
// ttl.
func startFailoverMeta(t *testing.T, ttl time.Duration) (*metaserver.Server, *devetcd.Etcd) {
	t.Helper()
	e, err := devetcd.Start(devetcd.Options{Dir: t.TempDir(), Fast: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return startMetaOn(t, e, "127.0.0.1:0", ttl), e
}

func startMetaOn(t *testing.T, e *devetcd.Etcd, addr string, ttl time.Duration) *metaserver.Server {
	t.Helper()
	o := metaserver.NewOptions()
	o.Addr, o.HTTPAddr, o.EtcdEndpoints, o.AdminToken = addr, "127.0.0.1:0", e.Endpoints(), "t"
	o.EtcdTimeout, o.BrokerTTL = 2*time.Second, ttl
	s, err := metaserver.New(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

type nodeChild struct {
	name, addr, httpAddr string
	cmd                  *exec.Cmd
	log                  *lockedBuffer
	done                 chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
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

// startNode starts a child Node and waits until it serves.
func startNode(t *testing.T, name, dir, addr, httpAddr, role, meta string, env ...string) *nodeChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFailoverChild$")
	cmd.Env = append(append(os.Environ(), testutil.ChildEnv+"="+failoverChildRole, "QMQ_RT_FO_DIR="+dir, "QMQ_RT_FO_ADDR="+addr,
		"QMQ_RT_FO_HTTP="+httpAddr, "QMQ_RT_FO_ROLE="+role, "QMQ_RT_FO_META="+meta), env...)
	c := &nodeChild{name: name, addr: addr, httpAddr: httpAddr, cmd: cmd, log: &lockedBuffer{}, done: make(chan struct{})}
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
		if testing.Verbose() {
			for _, line := range strings.Split(c.log.String(), "\n") {
				for _, key := range []string{"won the group", "deposed", "cut back", "store truncated", "serving as", "serving epoch", "caught up", "takeover", "campaign", "write state", "eligible"} {
					if strings.Contains(line, key) {
						t.Logf("%s: %s", name, line)
						break
					}
				}
			}
		}
		if strings.Contains(c.log.String(), "WARNING: DATA RACE") {
			t.Errorf("%s: data race", name)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, c.log.String())
		}
	})
	return c
}

func (c *nodeChild) kill() {
	c.cmd.Process.Kill()
	<-c.done
}

// term stops the child gracefully and waits for it.
func (c *nodeChild) term(t *testing.T) {
	t.Helper()
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		c.kill()
		t.Fatalf("%s did not stop on SIGTERM", c.name)
	}
	if code := c.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("%s exited with %d", c.name, code)
	}
}

func (c *nodeChild) gauge(name string) (float64, error) {
	resp, err := http.Get("http://" + c.httpAddr + "/metrics")
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
	return 0, fmt.Errorf("%s: no %s", c.name, name)
}

func (c *nodeChild) waitGauge(t *testing.T, timeout time.Duration, name string, ok func(float64) bool) {
	t.Helper()
	testutil.CheckFor(t, timeout, 50*time.Millisecond, func() error {
		v, err := c.gauge(name)
		if err != nil {
			return err
		}
		if !ok(v) {
			return fmt.Errorf("%s: %s is %v", c.name, name, v)
		}
		return nil
	})
}

func is(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

// waitSlaveHolds waits until master's slave holds both of its logs up to
// its committed ends and the master no longer serves alone, and the ends
// stay put past an action flush (actions are committed every 50 ms).
// waitSlaveCopies waits until master is a master with its slave (not
// serving alone) and the slave's durable end has passed the master's
// message end as it stood when that first held: the slave copies while
// writes go on (waitSlaveHolds needs the writes to pause).
func waitSlaveCopies(t *testing.T, master *nodeChild, timeout time.Duration) {
	t.Helper()
	target := -1.0
	testutil.CheckFor(t, timeout, 100*time.Millisecond, func() error {
		vals := map[string]float64{}
		for _, g := range []string{"qmq_realtime_role", "qmq_realtime_serving_alone", "qmq_realtime_slave_offset_bytes",
			"qmq_realtime_message_end_bytes"} {
			v, err := master.gauge(g)
			if err != nil {
				return err
			}
			vals[g] = v
		}
		if vals["qmq_realtime_role"] != 1 || vals["qmq_realtime_serving_alone"] != 0 {
			target = -1
			return fmt.Errorf("%s: %v", master.name, vals)
		}
		if target < 0 {
			target = vals["qmq_realtime_message_end_bytes"]
		}
		if vals["qmq_realtime_slave_offset_bytes"] < target {
			return fmt.Errorf("%s: slave at %v, waiting for it to pass %v", master.name, vals["qmq_realtime_slave_offset_bytes"], target)
		}
		return nil
	})
}

func waitSlaveHolds(t *testing.T, master *nodeChild, timeout time.Duration) {
	t.Helper()
	var last map[string]float64
	testutil.CheckFor(t, timeout, 100*time.Millisecond, func() error {
		vals := map[string]float64{}
		for _, g := range []string{"qmq_realtime_role", "qmq_realtime_serving_alone", "qmq_realtime_slave_offset_bytes",
			"qmq_realtime_message_end_bytes", "qmq_realtime_slave_action_offset_bytes", "qmq_realtime_action_end_bytes"} {
			v, err := master.gauge(g)
			if err != nil {
				return err
			}
			vals[g] = v
		}
		if vals["qmq_realtime_role"] != 1 || vals["qmq_realtime_serving_alone"] != 0 ||
			vals["qmq_realtime_slave_offset_bytes"] != vals["qmq_realtime_message_end_bytes"] ||
			vals["qmq_realtime_slave_action_offset_bytes"] != vals["qmq_realtime_action_end_bytes"] {
			last = nil
			return fmt.Errorf("%s: %v", master.name, vals)
		}
		prev := last
		last = vals
		if prev == nil || prev["qmq_realtime_message_end_bytes"] != vals["qmq_realtime_message_end_bytes"] ||
			prev["qmq_realtime_action_end_bytes"] != vals["qmq_realtime_action_end_bytes"] {
			return fmt.Errorf("%s: caught up at %v; checking it stays", master.name, vals)
		}
		return nil
	})
}

// load sends messages with unique ids from a few goroutines until stopped,
// remembering which were acknowledged and when the last was.
type load struct {
	p     *producer.Producer
	stop  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
	mu    sync.Mutex
	acked []string
	times []time.Time
	fails int
}

func startLoad(p *producer.Producer, subject string, senders int) *load {
	l := &load{p: p, stop: make(chan struct{})}
	for g := 0; g < senders; g++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				id := fmt.Sprintf("g%d-%d", g, i)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := p.Send(ctx, &producer.Message{Subject: subject, ID: id, Body: []byte(id)})
				cancel()
				l.mu.Lock()
				if err == nil {
					l.acked = append(l.acked, id)
					l.times = append(l.times, time.Now())
				} else {
					l.fails++
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// firstAckAfter returns the time of the first acknowledgement after t.
func (l *load) firstAckAfter(t time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, at := range l.times {
		if at.After(t) {
			return at, true
		}
	}
	return time.Time{}, false
}

func (l *load) finish() []string {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
	return l.acked
}

func (l *load) waitCount(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, fmt.Sprintf("%d sends acknowledged", n), func() bool { return l.count() >= n })
}

func newMetaClients(t *testing.T, meta string) (*producer.Producer, *metaclient.Client) {
	t.Helper()
	mc, err := metaclient.New([]string{meta}, "failover-test", metaclient.WithRefreshInterval(200*time.Millisecond),
		metaclient.WithMinEarlyRefresh(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mc.Close() })
	p, err := producer.New(producer.WithResolver(mc), producer.WithTransportOptions(fastTransport), producer.WithSendTimeout(20*time.Second),
		producer.WithLogger(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p, mc
}

func subscribe(t *testing.T, mc *metaclient.Client, id, subject string, col *collector) *consumer.Consumer {
	t.Helper()
	c, err := consumer.New(consumer.WithResolver(mc), consumer.WithConsumerID(id), consumer.WithTransportOptions(fastTransport),
		consumer.WithRouteRefresh(200*time.Millisecond), consumer.WithLogger(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before the meta client it resolves through
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	if _, err := c.Subscribe(subject, "g", col.handler, consumer.StartEarliest(), consumer.Concurrency(4)); err != nil {
		t.Fatal(err)
	}
	return c
}

// logsOf opens a stopped broker's store and returns its state and both
// logs' bytes.
func logsOf(t *testing.T, dir string) (copyState, []byte, []byte) {
	t.Helper()
	st := storeState(t, dir, true)
	o := store.DefaultOptions
	o.SegmentSize = replSegment
	o.Limits.MaxBody = replMaxBody
	o.CheckpointInterval, o.RetentionInterval, o.RetentionAge = -1, -1, -1
	o.Replica = true
	s, err := store.Open(dir, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	read := func(rd func(int64, int) (store.LogChunk, error)) []byte {
		var out []byte
		for off := int64(0); ; {
			c, err := rd(off, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Data) == 0 {
				return out
			}
			out = append(out, c.Data...)
			off = c.Offset + int64(len(c.Data))
		}
	}
	return st, read(s.Source().ReadMessageLog), read(s.Source().ReadActionLog)
}

// The master is SIGKILLed under steady produce and consume load with
// --wait-slave: the slave wins the group within seconds, producers and
// consumers follow it, every acknowledged message is delivered. The old
// master, restarted, rejoins as the slave, cuts off what the new master
// never had and converges: both logs byte-identical.
func TestFailover_KillMasterUnderLoad(t *testing.T) {
	t.Parallel() // mostly waiting for leases: the failover tests overlap
	meta, _ := startFailoverMeta(t, failoverTTL)
	metaAddr := meta.Addr().String()
	aDir, bDir := t.TempDir(), t.TempDir()
	aAddr, aHTTP, bAddr, bHTTP := testutil.ReusableAddr(t), testutil.ReusableAddr(t), testutil.ReusableAddr(t), testutil.ReusableAddr(t)
	a := startNode(t, "A", aDir, aAddr, aHTTP, realtime.RoleMaster, metaAddr)
	a.waitGauge(t, 20*time.Second, "qmq_realtime_role", is(1))
	b := startNode(t, "B", bDir, bAddr, bHTTP, realtime.RoleSlave, metaAddr)
	b.waitGauge(t, 20*time.Second, "qmq_realtime_role", is(2))
	waitSlaveHolds(t, a, 20*time.Second)

	p, mc := newMetaClients(t, metaAddr)
	col := newCollector()
	c := subscribe(t, mc, "c1", "fo", col)
	l := startLoad(p, "fo", 4)
	l.waitCount(t, 300, 30*time.Second)

	a.kill()
	killed := time.Now()
	testutil.Eventually(t, 30*time.Second, "a send acknowledged after the kill", func() bool {
		_, ok := l.firstAckAfter(killed)
		return ok
	})
	first, _ := l.firstAckAfter(killed)
	b.waitGauge(t, 5*time.Second, "qmq_realtime_role", is(1))
	resendToPromoted(t, l, b)
	before := l.count()
	l.waitCount(t, before+300, 30*time.Second)
	acked := l.finish()
	t.Logf("failover: SIGKILL at %s, first acknowledged send %v after it (lease ttl %v); %d sends acknowledged, %d failed",
		killed.UTC().Format("15:04:05.000"), first.Sub(killed).Round(time.Millisecond), failoverTTL, len(acked), l.fails)
	if d := first.Sub(killed); d > 4*failoverTTL {
		t.Errorf("failover took %v", d)
	}
	col.waitAll(t, acked, 30*time.Second)

	// The old master comes back: a slave of B, cut back and converged.
	a = startNode(t, "A again", aDir, aAddr, aHTTP, realtime.RoleMaster, metaAddr)
	a.waitGauge(t, 20*time.Second, "qmq_realtime_role", is(2))
	more := startLoad(p, "fo", 2)
	more.waitCount(t, 100, 30*time.Second)
	acked = append(acked, more.finish()...)
	col.waitAll(t, acked, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	c.Close(ctx)
	cancel()
	waitSlaveHolds(t, b, 30*time.Second)
	a.term(t)
	b.term(t)
	as, am, aa := logsOf(t, aDir)
	bs, bm, ba := logsOf(t, bDir)
	if !bytes.Equal(am, bm) || !bytes.Equal(aa, ba) {
		t.Fatalf("logs differ after the rejoin: message %d vs %d bytes, action %d vs %d bytes", len(am), len(bm), len(aa), len(ba))
	}
	if fmt.Sprint(as) != fmt.Sprint(bs) {
		t.Fatalf("stores differ after the rejoin:\n A %+v\n B %+v", as, bs)
	}
	t.Logf("converged: %d message-log and %d action-log bytes; %d messages delivered (%d duplicates)", len(am), len(aa), col.total.Load(), col.duplicates())
}

// resendToPromoted resends the first message l got acknowledged (by the
// master before the failover) straight to the promoted master b, once b
// has read the dedupe window back from its log: it is a duplicate.
func resendToPromoted(t *testing.T, l *load, b *nodeChild) {
	t.Helper()
	b.waitGauge(t, 20*time.Second, "qmq_realtime_dedupe_seeded_ids", func(v float64) bool { return v > 0 })
	l.mu.Lock()
	id := l.acked[0]
	l.mu.Unlock()
	tc, err := transport.New(fastTransport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	raw, err := protocol.AppendMessage(nil, &protocol.Message{Subject: "fo", ID: id, Body: []byte("resent")}, protocol.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tc.Call(context.Background(), b.addr, protocol.CmdSend, protocol.AppendSendRequest(nil, 0, [][]byte{raw}))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := protocol.DecodeSendResponse(resp); err != nil || st[0] != protocol.StatusDuplicate {
		t.Fatalf("a resend of %s, acknowledged before the failover, to the promoted master: %v, %v; want duplicate", id, st, err)
	}
}

// The old master holds records its slave never copied (the slave was
// stopped while sends waited for it, unacknowledged) when it is killed;
// the slave wins with a shorter log. Restarted, the old master cuts its
// logs back to the new master's promotion point (its extra records were
// never acknowledged) and converges byte for byte.
func TestFailover_OldMasterCutBack(t *testing.T) {
	t.Parallel() // mostly waiting for leases: the failover tests overlap
	meta, _ := startFailoverMeta(t, failoverTTL)
	metaAddr := meta.Addr().String()
	aDir, bDir := t.TempDir(), t.TempDir()
	aAddr, aHTTP, bAddr, bHTTP := testutil.ReusableAddr(t), testutil.ReusableAddr(t), testutil.ReusableAddr(t), testutil.ReusableAddr(t)
	a := startNode(t, "A", aDir, aAddr, aHTTP, realtime.RoleMaster, metaAddr)
	a.waitGauge(t, 20*time.Second, "qmq_realtime_role", is(1))
	b := startNode(t, "B", bDir, bAddr, bHTTP, realtime.RoleSlave, metaAddr)
	b.waitGauge(t, 20*time.Second, "qmq_realtime_role", is(2))
	waitSlaveHolds(t, a, 20*time.Second)

	p, mc := newMetaClients(t, metaAddr)
	l := startLoad(p, "cut", 4)
	l.waitCount(t, 200, 30*time.Second)
	// Stop the slave (not long enough for its own lease to expire). A
	// fetch it had outstanding is answered with what the master appends
	// next and waits in its socket; once that happened, sends the master
	// stores cannot reach it: they stay unacknowledged on the master only.
	b.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(300 * time.Millisecond)
	end, err := a.gauge("qmq_realtime_message_end_bytes")
	if err != nil {
		t.Fatal(err)
	}
	tr := newClient(t)
	for i := range 5 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = rawSend(ctx, tr, aAddr, "cut", fmt.Sprint("unacked", i))
		}()
	}
	a.waitGauge(t, 10*time.Second, "qmq_realtime_message_end_bytes", func(v float64) bool { return v > end })
	a.kill()
	b.cmd.Process.Signal(syscall.SIGCONT)
	b.waitGauge(t, 30*time.Second, "qmq_realtime_role", is(1))
	before := l.count()
	l.waitCount(t, before+200, 30*time.Second)
	acked := l.finish()

	a = startNode(t, "A again", aDir, aAddr, aHTTP, realtime.RoleMaster, metaAddr)
	testutil.Eventually(t, 30*time.Second, "A cut its copy back", func() bool {
		return strings.Contains(a.log.String(), "copy cut back")
	})
	a.waitGauge(t, 20*time.Second, "qmq_realtime_role", is(2))
	col := newCollector()
	c := subscribe(t, mc, "c1", "cut", col)
	col.waitAll(t, acked, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	c.Close(ctx)
	cancel()
	waitSlaveHolds(t, b, 30*time.Second)
	a.term(t)
	b.term(t)
	_, am, aa := logsOf(t, aDir)
	_, bm, ba := logsOf(t, bDir)
	if !bytes.Equal(am, bm) || !bytes.Equal(aa, ba) {
		t.Fatalf("logs differ after the cut: message %d vs %d bytes, action %d vs %d bytes", len(am), len(bm), len(aa), len(ba))
	}
}

// A master whose group has no slave keeps taking writes when the meta
// servers are gone (nobody else can be elected), past its lease; when a
// meta server is back after the lease expired, it wins its group again at
// a new epoch without a pause in writes.
func TestFailover_MetaDownAloneWritesContinue(t *testing.T) {
	t.Parallel()
	meta, etcd := startFailoverMeta(t, failoverTTL)
	metaAddr := meta.Addr().String()
	o := realtime.NewOptions()
	o.Group, o.Addr, o.HTTPAddr, o.DataDir = failoverGroup, "127.0.0.1:0", "", t.TempDir()
	o.MetaServers, o.SegmentSize, o.MaxBody = []string{metaAddr}, replSegment, replMaxBody
	n, err := realtime.New(o, zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	c := newClient(t)
	addr := n.Addr().String()
	ctx := context.Background()
	testutil.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error { return rawSend(ctx, c, addr, "cut", "before") })
	epoch := n.Replication().Epoch
	if st := n.Replication(); epoch == 0 || st.WriteState != protocol.WriteAlone {
		t.Fatalf("a registered master without a slave: epoch %d, write state %v", epoch, st.WriteState)
	}

	if err := meta.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := n.Replication()
	expires := st.LeaseRenewedAt.Add(st.LeaseTTL)
	for i := 0; time.Now().Before(expires.Add(500 * time.Millisecond)); i++ {
		if err := rawSend(ctx, c, addr, "cut", fmt.Sprint("during", i)); err != nil {
			t.Fatalf("send %d with the meta server gone (lease renewed %v ago, ttl %v): %v", i, time.Since(st.LeaseRenewedAt), st.LeaseTTL, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Past the lease's expiry a meta server comes back on the same address.
	startMetaOn(t, etcd, metaAddr, failoverTTL)
	after := 0
	testutil.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		after++
		if err := rawSend(ctx, c, addr, "cut", fmt.Sprint("after", after)); err != nil {
			return err
		}
		if e := n.Replication().Epoch; e <= epoch {
			return fmt.Errorf("epoch %d after the lease expired, %d before", e, epoch)
		}
		return nil
	})
}

// The slave is SIGKILLed under load (--wait-slave): the master notices the
// broken replication connection at once, removes the slave from the
// eligible set and serves alone within half a second; sends go on. The
// restarted slave catches up and becomes eligible again (replies wait for
// it again). Every acknowledged message is delivered. A timing test (the
// half second): the gate runs it without the race detector.
func TestTiming_FailoverKillSlave(t *testing.T) {
	if raceEnabled {
		t.Skip("timing test: the race detector distorts it (scripts/test.sh runs TestTiming tests in an un-raced pass)")
	}
	t.Parallel()
	meta, _ := startFailoverMeta(t, failoverTTL)
	metaAddr := meta.Addr().String()
	aDir, bDir := t.TempDir(), t.TempDir()
	aAddr, aHTTP, bAddr, bHTTP := testutil.ReusableAddr(t), testutil.ReusableAddr(t), testutil.ReusableAddr(t), testutil.ReusableAddr(t)
	a := startNode(t, "A", aDir, aAddr, aHTTP, realtime.RoleMaster, metaAddr)
	a.waitGauge(t, 20*time.Second, "qmq_realtime_role", is(1))
	b := startNode(t, "B", bDir, bAddr, bHTTP, realtime.RoleSlave, metaAddr)
	waitSlaveHolds(t, a, 20*time.Second)
	a.waitGauge(t, 10*time.Second, "qmq_failover_eligible_slave", is(1))

	p, mc := newMetaClients(t, metaAddr)
	col := newCollector()
	subscribe(t, mc, "c1", "slavekill", col)
	l := startLoad(p, "slavekill", 4)
	l.waitCount(t, 200, 30*time.Second)
	b.kill()
	killed := time.Now()
	a.waitGauge(t, 5*time.Second, "qmq_failover_write_state", is(float64(protocol.WriteAlone)))
	took := time.Since(killed)
	t.Logf("serving alone %v after the slave's SIGKILL (the gauge polled every 50ms)", took.Round(time.Millisecond))
	if took > 500*time.Millisecond+100*time.Millisecond {
		t.Errorf("the slave-down policy took %v", took)
	}
	before := l.count()
	l.waitCount(t, before+100, 10*time.Second)
	b = startNode(t, "B again", bDir, bAddr, bHTTP, realtime.RoleSlave, metaAddr)
	a.waitGauge(t, 30*time.Second, "qmq_failover_eligible_slave", is(1))
	a.waitGauge(t, 5*time.Second, "qmq_failover_write_state", is(float64(protocol.WriteWritable)))
	before = l.count()
	l.waitCount(t, before+200, 30*time.Second)
	acked := l.finish()
	col.waitAll(t, acked, 30*time.Second)
	t.Logf("%d sends acknowledged, %d failed", len(acked), l.fails)
}

// A planned switchover (CmdSwitchover, as the meta server relays it) hands
// the group to the slave under load: the master stops writes, waits for
// its slave, leaves the master seat and rejoins as the slave; the slave
// wins at a higher epoch; every acknowledged message is delivered. A
// switchover of a group without a caught-up slave is refused.
func TestFailover_Switchover(t *testing.T) {
	t.Parallel() // mostly waiting for leases: the failover tests overlap
	meta, _ := startFailoverMeta(t, failoverTTL)
	metaAddr := meta.Addr().String()
	aDir, bDir := t.TempDir(), t.TempDir()
	aAddr, aHTTP, bAddr, bHTTP := testutil.ReusableAddr(t), testutil.ReusableAddr(t), testutil.ReusableAddr(t), testutil.ReusableAddr(t)
	a := startNode(t, "A", aDir, aAddr, aHTTP, realtime.RoleMaster, metaAddr)
	a.waitGauge(t, 20*time.Second, "qmq_realtime_role", is(1))
	tr := newClient(t)
	ctx := context.Background()
	body := protocol.AppendSwitchoverRequest(nil, &protocol.SwitchoverRequest{Group: failoverGroup})
	if _, err := tr.Call(ctx, aAddr, protocol.CmdSwitchover, body); !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("switchover without a slave: %v", err)
	}
	b := startNode(t, "B", bDir, bAddr, bHTTP, realtime.RoleSlave, metaAddr)
	waitSlaveHolds(t, a, 20*time.Second)
	epoch, _ := a.gauge("qmq_realtime_epoch")

	p, mc := newMetaClients(t, metaAddr)
	col := newCollector()
	subscribe(t, mc, "c1", "switch", col)
	l := startLoad(p, "switch", 4)
	l.waitCount(t, 200, 30*time.Second)
	if epoch != 1 {
		t.Fatalf("the first master of a new group is at epoch %v, want 1 (epochs count elections)", epoch)
	}
	body = protocol.AppendSwitchoverRequest(nil, &protocol.SwitchoverRequest{Group: failoverGroup, Epoch: uint64(epoch), Timeout: 10 * time.Second})
	if _, err := tr.Call(ctx, aAddr, protocol.CmdSwitchover, body); err != nil {
		t.Fatalf("switchover: %v", err)
	}
	b.waitGauge(t, 20*time.Second, "qmq_realtime_role", is(1))
	a.waitGauge(t, 20*time.Second, "qmq_realtime_role", is(2))
	b.waitGauge(t, 5*time.Second, "qmq_realtime_epoch", is(epoch+1))
	// A switchover asked at the epoch before is refused by the new master.
	wrong := protocol.AppendSwitchoverRequest(nil, &protocol.SwitchoverRequest{Group: failoverGroup, Epoch: uint64(epoch)})
	if _, err := tr.Call(ctx, bAddr, protocol.CmdSwitchover, wrong); !errors.Is(err, protocol.ErrStaleEpoch) {
		t.Fatalf("switchover at an older epoch: %v", err)
	}
	before := l.count()
	l.waitCount(t, before+200, 30*time.Second)
	acked := l.finish()
	col.waitAll(t, acked, 30*time.Second)
	waitSlaveHolds(t, b, 30*time.Second)
	if strings.Contains(a.log.String(), "copy cut back") && !strings.Contains(a.log.String(), `"message_bytes_cut": 0,`) {
		t.Fatal("the old master had to cut messages off after a switchover")
	}
}

// A slave that won its group (a campaign stops its copy first) and is
// later deposed copies again: after a switchover there and back, the first
// slave is the slave of its old master again and holds every write.
func TestFailover_SwitchoverThereAndBack(t *testing.T) {
	t.Parallel()
	meta, _ := startFailoverMeta(t, failoverTTL)
	metaAddr := meta.Addr().String()
	aAddr, aHTTP, bAddr, bHTTP := testutil.ReusableAddr(t), testutil.ReusableAddr(t), testutil.ReusableAddr(t), testutil.ReusableAddr(t)
	a := startNode(t, "A", t.TempDir(), aAddr, aHTTP, realtime.RoleMaster, metaAddr)
	a.waitGauge(t, 20*time.Second, "qmq_realtime_role", is(1))
	b := startNode(t, "B", t.TempDir(), bAddr, bHTTP, realtime.RoleSlave, metaAddr)
	waitSlaveHolds(t, a, 20*time.Second)
	p, _ := newMetaClients(t, metaAddr)
	l := startLoad(p, "thereandback", 2)
	defer l.finish()
	tr := newClient(t)
	switchover := func(from *nodeChild, addr string) {
		t.Helper()
		epoch, err := from.gauge("qmq_realtime_epoch")
		if err != nil {
			t.Fatal(err)
		}
		body := protocol.AppendSwitchoverRequest(nil, &protocol.SwitchoverRequest{Group: failoverGroup, Epoch: uint64(epoch), Timeout: 10 * time.Second})
		if _, err := tr.Call(context.Background(), addr, protocol.CmdSwitchover, body); err != nil {
			t.Fatalf("switchover from %s: %v", from.name, err)
		}
	}
	l.waitCount(t, 100, 30*time.Second)
	switchover(a, aAddr)
	b.waitGauge(t, 20*time.Second, "qmq_realtime_role", is(1))
	waitSlaveCopies(t, b, 30*time.Second)
	l.waitCount(t, l.count()+100, 30*time.Second)
	switchover(b, bAddr) // B won by a campaign: deposed now, it must copy again
	a.waitGauge(t, 20*time.Second, "qmq_realtime_role", is(1))
	waitSlaveCopies(t, a, 30*time.Second)
	l.waitCount(t, l.count()+100, 30*time.Second)
	l.finish()
	waitSlaveHolds(t, a, 30*time.Second) // writes stopped: B holds all of them
}

// The master is frozen (SIGSTOP) past its lease: the slave wins. Resumed,
// the old master never takes a write — its lease renewal is too old, then
// the meta server refuses its heartbeat and it is deposed — and it rejoins
// as the new master's slave.
func TestFailover_FrozenMasterDeposed(t *testing.T) {
	t.Parallel()
	meta, _ := startFailoverMeta(t, failoverTTL)
	metaAddr := meta.Addr().String()
	aDir, bDir := t.TempDir(), t.TempDir()
	aAddr, aHTTP, bAddr, bHTTP := testutil.ReusableAddr(t), testutil.ReusableAddr(t), testutil.ReusableAddr(t), testutil.ReusableAddr(t)
	a := startNode(t, "A", aDir, aAddr, aHTTP, realtime.RoleMaster, metaAddr)
	a.waitGauge(t, 20*time.Second, "qmq_realtime_role", is(1))
	b := startNode(t, "B", bDir, bAddr, bHTTP, realtime.RoleSlave, metaAddr)
	waitSlaveHolds(t, a, 20*time.Second)
	tr := newClient(t)
	ctx := context.Background()
	if err := rawSend(ctx, tr, aAddr, "frozen", "before"); err != nil {
		t.Fatal(err)
	}

	a.cmd.Process.Signal(syscall.SIGSTOP)
	b.waitGauge(t, 30*time.Second, "qmq_realtime_role", is(1))
	if err := rawSend(ctx, tr, bAddr, "frozen", "on-b"); err != nil {
		t.Fatal(err)
	}
	a.cmd.Process.Signal(syscall.SIGCONT)
	// From the moment it runs again until it is a slave, every write is
	// refused.
	for i := 0; ; i++ {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := rawSend(sctx, tr, aAddr, "frozen", fmt.Sprint("after", i))
		cancel()
		if err == nil {
			t.Fatalf("the old master took send %d after a new master was elected", i)
		}
		if v, gerr := a.gauge("qmq_realtime_role"); gerr == nil && v == 2 {
			break
		}
		if i > 2000 {
			t.Fatalf("the old master never became a slave: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !strings.Contains(a.log.String(), "deposed") {
		t.Fatal("the old master did not log its deposition")
	}
	waitSlaveHolds(t, b, 30*time.Second)
}

// A master stopped gracefully (SIGTERM) under load hands over like a
// switchover: writes stop, its slave gets everything, the seat is freed
// at once (the slave wins without waiting for a lease to expire); every
// acknowledged message is delivered and the old master, restarted,
// rejoins without cutting messages off.
func TestFailover_MasterShutdownHandsOver(t *testing.T) {
	t.Parallel()
	meta, _ := startFailoverMeta(t, failoverTTL)
	metaAddr := meta.Addr().String()
	aDir, bDir := t.TempDir(), t.TempDir()
	aAddr, aHTTP, bAddr, bHTTP := testutil.ReusableAddr(t), testutil.ReusableAddr(t), testutil.ReusableAddr(t), testutil.ReusableAddr(t)
	a := startNode(t, "A", aDir, aAddr, aHTTP, realtime.RoleMaster, metaAddr)
	a.waitGauge(t, 20*time.Second, "qmq_realtime_role", is(1))
	b := startNode(t, "B", bDir, bAddr, bHTTP, realtime.RoleSlave, metaAddr)
	waitSlaveHolds(t, a, 20*time.Second)

	p, mc := newMetaClients(t, metaAddr)
	col := newCollector()
	subscribe(t, mc, "c1", "shutdown", col)
	l := startLoad(p, "shutdown", 4)
	l.waitCount(t, 200, 30*time.Second)
	stopped := time.Now()
	a.term(t)
	b.waitGauge(t, 20*time.Second, "qmq_realtime_role", is(1))
	t.Logf("the slave serves %v after the master's SIGTERM (lease ttl %v)", time.Since(stopped).Round(time.Millisecond), failoverTTL)
	before := l.count()
	l.waitCount(t, before+200, 30*time.Second)
	a = startNode(t, "A again", aDir, aAddr, aHTTP, realtime.RoleMaster, metaAddr)
	a.waitGauge(t, 20*time.Second, "qmq_realtime_role", is(2))
	acked := l.finish()
	col.waitAll(t, acked, 30*time.Second)
	waitSlaveHolds(t, b, 30*time.Second)
	if strings.Contains(a.log.String(), "copy cut back") && !strings.Contains(a.log.String(), `"message_bytes_cut": 0,`) {
		t.Fatal("the old master had to cut messages off after a graceful shutdown")
	}
}

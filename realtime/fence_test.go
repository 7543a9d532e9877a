package realtime_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/pkg/devetcd"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/realtime"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// The write gate's safety and availability cases of pkg/failover, on
// in-process brokers: a group of a master A and a slave B registered with
// a meta server on embedded etcd (lease TTL fenceTTL). Links are cut with
// cutProxy: A advertises (and B copies through, and the meta server pings)
// a proxy in front of A's real address, and A reaches the meta server
// through another; the test's own sends go to A's real address.

const fenceTTL = 2 * time.Second

// cutProxy forwards TCP connections to target until Cut: from then on it
// drops every byte both ways without closing anything (a silent partition:
// no RST, no FIN), until Heal.
type cutProxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	go p.acceptLoop()
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) acceptLoop() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			u.Close()
			return
		}
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go p.pipe(c, u)
		go p.pipe(u, c)
	}
}

// pipe copies from src to dst, dropping what it reads while cut.
func (p *cutProxy) pipe(src, dst net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) || !p.cut.Load() {
				dst.Close()
			}
			return
		}
	}
}

// Cut drops everything from now on; Heal forwards again (the connections
// cut mid-frame break, and their clients dial again).
func (p *cutProxy) Cut() { p.cut.Store(true) }
func (p *cutProxy) Heal() {
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.cut.Store(false)
}

func (p *cutProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

// fenceGroup is a master A and a slave B with their proxies.
type fenceGroup struct {
	t                *testing.T
	etcd             *devetcd.Etcd
	meta             *metaserver.Server
	metaAddr         string
	aProxy, metaProx *cutProxy
	aAddr, aDir      string
	a, b             *realtime.Broker
}

func startFenceGroup(t *testing.T, waitSlave bool) *fenceGroup {
	t.Helper()
	meta, e := startFailoverMeta(t, fenceTTL)
	g := &fenceGroup{t: t, etcd: e, meta: meta, metaAddr: meta.Addr().String()}
	g.aAddr, g.aDir = testutil.ReusableAddr(t), t.TempDir()
	g.aProxy = startCutProxy(t, g.aAddr)
	g.metaProx = startCutProxy(t, g.metaAddr)
	g.a = g.startBroker("A", realtime.RoleMaster, g.aDir, g.aAddr, g.aProxy.addr(), g.metaProx.addr(), waitSlave)
	testutil.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if st := g.a.Replication(); st.Role != realtime.RoleMaster || st.Epoch == 0 {
			return fmt.Errorf("A: %+v", st)
		}
		return nil
	})
	g.b = g.startBroker("B", realtime.RoleSlave, t.TempDir(), "127.0.0.1:0", "", g.metaAddr, waitSlave)
	g.waitState(g.a, "A with B eligible", func(st realtime.ReplicationStatus) bool {
		return st.EligibleSlave != "" && st.WriteState == protocol.WriteWritable
	})
	return g
}

func (g *fenceGroup) startBroker(name, role, dir, addr, advertise, meta string, waitSlave bool) *realtime.Broker {
	t := g.t
	o := realtime.NewOptions()
	o.Group, o.Addr, o.AdvertiseAddr, o.HTTPAddr, o.DataDir = failoverGroup, addr, advertise, "", dir
	o.MetaServers, o.Role, o.WaitSlave = []string{meta}, role, waitSlave
	o.SegmentSize, o.MaxBody, o.SyncWait = replSegment, replMaxBody, 200*time.Millisecond
	b, err := realtime.New(o, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named(name))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	return b
}

func (g *fenceGroup) waitState(b *realtime.Broker, what string, ok func(realtime.ReplicationStatus) bool) {
	g.t.Helper()
	testutil.CheckFor(g.t, 20*time.Second, 10*time.Millisecond, func() error {
		if st := b.Replication(); !ok(st) {
			return fmt.Errorf("%s: %+v", what, st)
		}
		return nil
	})
}

// sender sends to addr every few milliseconds, recording when sends were
// acknowledged.
type sender struct {
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	acked   []string
	ackedAt []time.Time
	lastErr error
}

func startSender(t *testing.T, addr, prefix string) *sender {
	c := newClient(t)
	s := &sender{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for i := 0; ; i++ {
			select {
			case <-s.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			id := fmt.Sprintf("%s-%d", prefix, i)
			err := rawSend(ctx, c, addr, "fence", id)
			cancel()
			s.mu.Lock()
			if err == nil {
				s.acked, s.ackedAt = append(s.acked, id), append(s.ackedAt, time.Now())
			} else {
				s.lastErr = err
			}
			s.mu.Unlock()
		}
	}()
	t.Cleanup(s.finish)
	return s
}

func (s *sender) finish() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// ackedAfter returns how many sends were acknowledged after t, and the last.
func (s *sender) ackedAfter(t time.Time) (int, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, last := 0, time.Time{}
	for _, at := range s.ackedAt {
		if at.After(t) {
			n++
		}
		last = at
	}
	return n, last
}

func (s *sender) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.acked)
}

// copySampler samples a master's committed message-log end and its
// slave's durable end, to tell which acknowledged sends the slave held.
type copySampler struct {
	stop    chan struct{}
	done    chan struct{}
	samples []copySample
}

type copySample struct {
	at               time.Time
	messageEnd, copy int64
}

func startCopySampler(b *realtime.Broker) *copySampler {
	s := &copySampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			at := time.Now() // before the read: a sample after an ack reads past its record
			st := b.Replication()
			s.samples = append(s.samples, copySample{at: at, messageEnd: st.MessageEnd, copy: st.SlaveOffset})
			select {
			case <-s.stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return s
}

func (s *copySampler) finish() {
	close(s.stop)
	<-s.done
}

// copiedBefore reports whether a send acknowledged at ackedAt was durable
// on the slave by a sample taken before the cut: the first sample after the
// acknowledgement bounds the record's end, and a later one shows the slave
// past it.
func (s *copySampler) copiedBefore(ackedAt, cut time.Time) bool {
	end := int64(-1)
	for _, sm := range s.samples {
		if sm.at.After(cut) {
			return false
		}
		if end < 0 {
			if sm.at.After(ackedAt) {
				end = sm.messageEnd
			}
			continue
		}
		if sm.copy >= end {
			return true
		}
	}
	return false
}

// inBothModes runs f in parallel subtests "sync" (--wait-slave) and "async".
func inBothModes(t *testing.T, f func(t *testing.T, waitSlave bool)) {
	t.Parallel()
	for _, waitSlave := range []bool{true, false} {
		name := "async"
		if waitSlave {
			name = "sync"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, waitSlave)
		})
	}
}

// The meta server (and with it etcd, as the brokers see it) is gone: a
// master with a sync slave goes on writing (fencing comes from
// replication), and so does an async one whose slave copies (its slave
// lease), past its meta lease.
func TestFence_MetaDownWritesContinue(t *testing.T) {
	inBothModes(t, func(t *testing.T, waitSlave bool) {
		g := startFenceGroup(t, waitSlave)
		s := startSender(t, g.aAddr, "m")
		testutil.Eventually(t, 10*time.Second, "sends acknowledged", func() bool { return s.count() > 20 })
		st := g.a.Replication()
		if err := g.meta.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		until := st.LeaseRenewedAt.Add(st.LeaseTTL + 2*time.Second)
		time.Sleep(time.Until(until))
		if n, last := s.ackedAfter(until.Add(-time.Second)); n == 0 {
			t.Fatalf("no send acknowledged in the last second of %v without a meta server (last %v, error %v)", time.Since(stopped), last, s.lastErr)
		}
		if st := g.a.Replication(); st.WriteState != protocol.WriteWritable {
			t.Fatalf("A without a meta server: %+v", st)
		}
	})
}

// The slave goes (killed, or cut off) under a --wait-slave master: with a
// meta server the master removes it from the eligible set and serves alone
// within half a second of a broken connection; without one it cannot, and
// turns readonly.
func TestFence_SlaveGone(t *testing.T) {
	t.Parallel()
	t.Run("alone", func(t *testing.T) {
		t.Parallel()
		g := startFenceGroup(t, true)
		s := startSender(t, g.aAddr, "s")
		testutil.Eventually(t, 10*time.Second, "sends acknowledged", func() bool { return s.count() > 20 })
		if err := g.b.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		closed := time.Now()
		g.waitState(g.a, "A alone", func(st realtime.ReplicationStatus) bool {
			return st.WriteState == protocol.WriteAlone && st.EligibleSlave == ""
		})
		took := time.Since(closed)
		t.Logf("serving alone %v after the slave closed", took.Round(time.Millisecond))
		if took > 500*time.Millisecond {
			t.Errorf("the slave-down policy took %v, want at most 500ms", took)
		}
		n := s.count()
		testutil.Eventually(t, 5*time.Second, "sends acknowledged alone", func() bool { return s.count() > n+20 })
	})
	t.Run("readonly", func(t *testing.T) {
		t.Parallel()
		g := startFenceGroup(t, true)
		c := newClient(t)
		ctx := context.Background()
		if err := rawSend(ctx, c, g.aAddr, "fence", "before"); err != nil {
			t.Fatal(err)
		}
		g.metaProx.Cut()
		if err := g.b.Close(ctx); err != nil {
			t.Fatal(err)
		}
		g.waitState(g.a, "A readonly", func(st realtime.ReplicationStatus) bool { return st.WriteState == protocol.WriteReadonly })
		if err := rawSend(ctx, c, g.aAddr, "fence", "during"); !errors.Is(err, protocol.ErrReadonly) {
			t.Fatalf("a send with the slave and the meta server gone: %v, want readonly", err)
		}
		g.metaProx.Heal()
		g.waitState(g.a, "A alone once the meta server is back", func(st realtime.ReplicationStatus) bool {
			return st.WriteState == protocol.WriteAlone
		})
		if err := rawSend(ctx, c, g.aAddr, "fence", "after"); err != nil {
			t.Fatal(err)
		}
	})
}

// A is cut off from its slave and from the meta server (clients still
// reach it); the meta server cannot ping it either. B takes the group. The
// old master must not acknowledge a send after the cut (sync: its acks need
// B, which stopped acknowledging; async: its leases run out before B may
// campaign), and no acknowledged send is lost. When the links heal A is
// deposed and rejoins as B's slave.
func TestFence_OldMasterCannotAcknowledgeAfterATakeover(t *testing.T) {
	inBothModes(t, func(t *testing.T, waitSlave bool) {
		g := startFenceGroup(t, waitSlave)
		toA := startSender(t, g.aAddr, "a")
		testutil.Eventually(t, 10*time.Second, "sends acknowledged", func() bool { return toA.count() > 20 })
		copies := startCopySampler(g.a)
		g.aProxy.Cut()
		g.metaProx.Cut()
		cut := time.Now()
		copies.finish()
		toB := startSender(t, g.b.Addr().String(), "b")
		g.waitState(g.b, "B master", func(st realtime.ReplicationStatus) bool { return st.Role == realtime.RoleMaster })
		promoted := time.Now()
		testutil.Eventually(t, 10*time.Second, "B acknowledges", func() bool { return toB.count() > 0 })
		toB.mu.Lock()
		firstB := toB.ackedAt[0]
		toB.mu.Unlock()
		time.Sleep(time.Second) // A may try to acknowledge a while longer
		toA.finish()
		n, lastA := toA.ackedAfter(cut)
		t.Logf("B promoted %v after the cut; A acknowledged %d sends after it, the last %v after it; B's first %v after it",
			promoted.Sub(cut).Round(time.Millisecond), n, lastA.Sub(cut).Round(time.Millisecond), firstB.Sub(cut).Round(time.Millisecond))
		if waitSlave && n > 0 && lastA.After(cut.Add(100*time.Millisecond)) {
			t.Fatalf("the old master acknowledged %d sends after it was cut from its slave (the last %v after)", n, lastA.Sub(cut))
		}
		if !lastA.Before(firstB) {
			t.Fatalf("the old master acknowledged a send at %v, after the new master's first at %v", lastA, firstB)
		}

		g.aProxy.Heal()
		g.metaProx.Heal()
		g.waitState(g.a, "A back as B's slave", func(st realtime.ReplicationStatus) bool { return st.Role == realtime.RoleSlave })
		toB.finish()
		// Sync: nothing acknowledged is lost. Async: what A acknowledged
		// before the cut and B had copied durably before it must be there;
		// the rest (B's lag at the cut, and what A acknowledged until its
		// leases ran out) may be lost, as an async failover loses its
		// slave's lag.
		acked := append([]string(nil), toB.acked...)
		var uncopied []string
		for i, id := range toA.acked {
			if waitSlave || copies.copiedBefore(toA.ackedAt[i], cut) {
				acked = append(acked, id)
			} else if toA.ackedAt[i].Before(cut) {
				uncopied = append(uncopied, id)
			}
		}
		col := newCollector()
		cons, err := consumer.New(consumer.WithBrokers(g.b.Addr().String()), consumer.WithConsumerID("fence"),
			consumer.WithTransportOptions(fastTransport), consumer.WithLogger(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cons.Close(context.Background()) })
		if _, err := cons.Subscribe("fence", "g", col.handler, consumer.StartEarliest()); err != nil {
			t.Fatal(err)
		}
		col.waitAll(t, acked, 30*time.Second)
		if len(uncopied) > 0 {
			col.mu.Lock()
			arrived := 0
			for _, id := range uncopied {
				if col.count[id] > 0 {
					arrived++
				}
			}
			col.mu.Unlock()
			t.Logf("async: %d sends acknowledged before the cut were not known copied by B; %d of them arrived", len(uncopied), arrived)
		}
	})
}

// A slave that never copied from its group's master cannot win the group
// when the master is gone: it is not the eligible slave.
func TestFence_FreshSlaveCannotWin(t *testing.T) {
	t.Parallel()
	meta, _ := startFailoverMeta(t, fenceTTL)
	metaAddr := meta.Addr().String()
	g := &fenceGroup{t: t, meta: meta, metaAddr: metaAddr}
	aAddr := testutil.ReusableAddr(t)
	a := g.startBroker("A", realtime.RoleMaster, t.TempDir(), aAddr, "", metaAddr, true)
	c := newClient(t)
	testutil.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error { return rawSend(context.Background(), c, aAddr, "fence", "x") })
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := g.startBroker("B", realtime.RoleSlave, t.TempDir(), "127.0.0.1:0", "", metaAddr, true)
	deadline := time.Now().Add(3 * fenceTTL)
	for time.Now().Before(deadline) {
		if st := b.Replication(); st.Role != realtime.RoleSlave {
			t.Fatalf("a fresh slave won a group whose master is gone: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

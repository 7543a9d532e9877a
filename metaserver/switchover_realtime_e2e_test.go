package metaserver_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/metaserver/ctl"
	"github.com/qmq-go/qmq/pkg/devetcd"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"
)

// TestE2E_SwitchoverWithRealBrokers: a realtime group of a master and a
// slave (realtime.Brokers, each registering itself with the meta server), a producer and a
// consumer. qmqctl switchover hands the group to the slave while the
// producer keeps sending: the answer names the old and the new master at a
// larger epoch, the old master comes back as the slave, no send fails, and
// every message acknowledged before, during and after is received.
func TestE2E_SwitchoverWithRealBrokers(t *testing.T) {
	t.Parallel()
	e, err := devetcd.Start(devetcd.Options{Dir: t.TempDir(), Fast: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	o := metaserver.NewOptions()
	o.Addr, o.HTTPAddr, o.EtcdEndpoints, o.AdminToken = "127.0.0.1:0", "127.0.0.1:0", e.Endpoints(), "t"
	// A TTL long enough that a loaded machine's late heartbeat causes no
	// failover of its own in the middle of the test.
	o.EtcdTimeout, o.BrokerTTL = 2*time.Second, 10*time.Second
	s, err := metaserver.New(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() { _ = s.Close(ctx) })
	metas := []string{s.Addr().String()}

	start := func(role string) *realtime.Broker {
		bo := realtime.NewOptions()
		bo.Group, bo.Addr, bo.HTTPAddr, bo.DataDir, bo.SegmentSize = "rt1", "127.0.0.1:0", "", t.TempDir(), 8<<20
		bo.MetaServers, bo.Role = metas, role
		n, err := realtime.New(bo, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Close(ctx) })
		return n
	}
	m := start(realtime.RoleMaster)
	sl := start(realtime.RoleSlave)
	mAddr, sAddr := m.Addr().String(), sl.Addr().String()
	admin := api.NewClient(s.HTTPAddr().String(), "t", 5*time.Second)
	group := func() api.Group {
		gs, err := admin.Groups(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gs {
			if g.Name == "rt1" {
				return g
			}
		}
		return api.Group{}
	}
	waitFor(t, 20*time.Second, "rt1's master and slave registered at one epoch", func() bool {
		g := group()
		return g.Master == mAddr && g.Slave == sAddr && g.Epoch != 0 && g.SlaveEpoch == g.Epoch
	})
	before := group()

	mc, err := metaclient.New(metas, "switchover-e2e", metaclient.WithRefreshInterval(200*time.Millisecond), metaclient.WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Close() })
	p, err := producer.New(producer.WithResolver(mc), producer.WithSendTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(ctx) })
	var mu sync.Mutex
	got := map[string]bool{}
	c, err := consumer.New(consumer.WithResolver(mc), consumer.WithConsumerID("switchover-e2e"), consumer.WithRouteRefresh(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(ctx) })
	if _, err := c.Subscribe("orders", "billing", func(_ context.Context, msg *consumer.Message) error {
		mu.Lock()
		got[msg.ID] = true
		mu.Unlock()
		return nil
	}, consumer.StartEarliest()); err != nil {
		t.Fatal(err)
	}
	received := func(prefix string, n int) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for i := range n {
				if !got[fmt.Sprintf("%s-%d", prefix, i)] {
					return false
				}
			}
			return true
		}
	}
	send := func(prefix string, n int) {
		t.Helper()
		for i := range n {
			if err := p.Send(ctx, &producer.Message{Subject: "orders", ID: fmt.Sprintf("%s-%d", prefix, i), Body: []byte("x")}); err != nil {
				t.Fatalf("send %s-%d: %v", prefix, i, err)
			}
		}
	}
	send("before", 200)
	waitFor(t, 20*time.Second, "the messages sent before received", received("before", 200))
	send("unread", 100) // stored on the old master; read from the new one
	// Steady sends through the switchover: each one the application saw
	// acknowledged must be received; none may fail.
	stopLoad, loadDone := make(chan struct{}), make(chan struct{})
	var acked []string
	var loadErr error
	go func() {
		defer close(loadDone)
		for i := 0; ; i++ {
			select {
			case <-stopLoad:
				return
			default:
			}
			id := fmt.Sprintf("load-%d", i)
			if err := p.Send(ctx, &producer.Message{Subject: "orders", ID: id, Body: []byte("x")}); err != nil {
				loadErr = fmt.Errorf("send %s: %w", id, err)
				return
			}
			acked = append(acked, id)
			time.Sleep(2 * time.Millisecond)
		}
	}()

	var out, errOut bytes.Buffer
	code := ctl.Main([]string{"--meta-http=" + s.HTTPAddr().String(), tokenFlag(t, "t"), "switchover", "rt1", "--wait=30s"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("qmqctl switchover: exit %d\nstdout: %s\nstderr: %s", code, out.String(), errOut.String())
	}
	for _, want := range []string{"old master", mAddr, "new master", sAddr, fmt.Sprintf("at epoch %d", before.Epoch)} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("qmqctl switchover output lacks %q:\n%s", want, out.String())
		}
	}
	after := group()
	if after.Master != sAddr || after.Epoch <= before.Epoch {
		t.Fatalf("after the switchover: %+v (before: %+v)", after, before)
	}
	var last api.Group
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the group as last seen: %+v", last)
		}
	})
	waitFor(t, 20*time.Second, "the old master back as the slave at the new epoch", func() bool {
		g := group()
		last = g
		return g.Master == sAddr && g.Slave == mAddr && g.SlaveEpoch == g.Epoch && g.Epoch == after.Epoch
	})
	close(stopLoad)
	<-loadDone
	if loadErr != nil {
		t.Fatalf("a send during the switchover failed: %v", loadErr)
	}
	if len(acked) == 0 {
		t.Fatal("no send went through during the switchover")
	}
	t.Logf("%d messages sent during the switchover; qmqctl said:\n%s", len(acked), out.String())
	send("after", 100)
	waitFor(t, 30*time.Second, "every message received", func() bool {
		mu.Lock()
		for _, id := range acked {
			if !got[id] {
				mu.Unlock()
				return false
			}
		}
		mu.Unlock()
		return received("unread", 100)() && received("after", 100)()
	})
	if mr, sr := m.Role(), sl.Role(); mr != realtime.RoleSlave || sr != realtime.RoleMaster {
		t.Fatalf("the old master reports role %q, the promoted slave %q", mr, sr)
	}
}

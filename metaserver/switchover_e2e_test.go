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
	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/metaserver/ctl"
	"github.com/qmq-go/qmq/pkg/devetcd"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"
)

// TestE2E_SwitchoverOfADelayGroup: a delay group of a master and a slave
// (each registering itself), delayed messages sent through the meta
// server's routes and delivered through a realtime broker. qmqctl shows the
// seats, epochs and the slave's lag; qmqctl switchover hands the group to
// the slave; every message is delivered once, never early, whether it was
// sent before or after the handover.
func TestE2E_SwitchoverOfADelayGroup(t *testing.T) {
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
	o.EtcdTimeout, o.BrokerTTL = 2*time.Second, 6*time.Second
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

	ro := realtime.NewOptions()
	ro.Addr, ro.HTTPAddr, ro.DataDir, ro.SegmentSize = "127.0.0.1:0", "", t.TempDir(), 8<<20
	rt, err := realtime.New(ro, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(ctx) })
	startDelay := func(role string) *delay.Server {
		do := delay.NewOptions()
		do.Addr, do.HTTPAddr, do.DataDir, do.Realtime, do.MetaServers = "127.0.0.1:0", "", t.TempDir(), []string{rt.Addr().String()}, metas
		do.Role, do.SyncWait = role, 200*time.Millisecond
		d, err := delay.New(do, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close(ctx) })
		return d
	}
	a := startDelay(delay.RoleMaster)
	admin := api.NewClient(s.HTTPAddr().String(), "t", 5*time.Second)
	group := func() api.Group {
		gs, err := admin.Groups(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gs {
			if g.Name == "dl1" {
				return g
			}
		}
		return api.Group{}
	}
	waitFor(t, 20*time.Second, "dl1's master registered", func() bool { return group().Master == a.Addr().String() })
	b := startDelay(delay.RoleSlave)
	aAddr, bAddr := a.Addr().String(), b.Addr().String()
	waitFor(t, 20*time.Second, "dl1's slave registered at the master's epoch", func() bool {
		g := group()
		return g.Master == aAddr && g.Slave == bAddr && g.Epoch != 0 && g.SlaveEpoch == g.Epoch && g.Lag != nil
	})
	before := group()

	var mu sync.Mutex
	got := map[string][]time.Time{}
	due := map[string]time.Time{}
	c, err := consumer.New(consumer.WithBrokers(rt.Addr().String()), consumer.WithConsumerID("switchover-e2e"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(ctx) })
	if _, err := c.Subscribe("later", "g", func(_ context.Context, m *consumer.Message) error {
		mu.Lock()
		got[m.ID] = append(got[m.ID], time.Now())
		mu.Unlock()
		return nil
	}, consumer.StartEarliest()); err != nil {
		t.Fatal(err)
	}
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
	// Each message is due ahead of its own send (a send may wait for a
	// route after the switchover; one due within the producer's delay
	// threshold would go to a realtime group instead).
	send := func(prefix string, n int, ahead time.Duration) {
		t.Helper()
		for i := range n {
			id, at := fmt.Sprintf("%s-%d", prefix, i), time.Now().Add(ahead).Truncate(time.Millisecond) // the wire carries milliseconds
			if err := p.Send(ctx, &producer.Message{Subject: "later", ID: id, Body: []byte("x"), DeliverAt: at}); err != nil {
				t.Fatalf("send %s: %v", id, err)
			}
			mu.Lock()
			due[id] = at
			mu.Unlock()
		}
	}
	send("before", 30, 3*time.Second)

	var out, errOut bytes.Buffer
	if code := ctl.Main([]string{"--meta-http=" + s.HTTPAddr().String(), "groups"}, &out, &errOut); code != 0 {
		t.Fatalf("qmqctl groups: exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"dl1", "delay", aAddr, bAddr, "REPLICA LAG", fmt.Sprint(before.Epoch)} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("qmqctl groups lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	code := ctl.Main([]string{"--meta-http=" + s.HTTPAddr().String(), tokenFlag(t, "t"), "switchover", "dl1", "--wait=30s"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("qmqctl switchover: exit %d\nstdout: %s\nstderr: %s", code, out.String(), errOut.String())
	}
	for _, want := range []string{"old master", aAddr, fmt.Sprintf("at epoch %d", before.Epoch), "new master", bAddr} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("qmqctl switchover output lacks %q:\n%s", want, out.String())
		}
	}
	after := group()
	if after.Master != bAddr || after.Epoch <= before.Epoch {
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
		return g.Master == bAddr && g.Slave == aAddr && g.SlaveEpoch == g.Epoch && g.Epoch == after.Epoch
	})
	if ra, rb := a.Replication(), b.Replication(); ra.Role != delay.RoleSlave || rb.Role != delay.RoleMaster || rb.Epoch != after.Epoch {
		t.Fatalf("after the switchover the old master reports %+v, the new one %+v", ra, rb)
	}
	// Far enough ahead that a send slowed while the producer moves to the
	// new master (seconds on a loaded machine) still names a time beyond
	// the producer's realtime threshold when it is retried.
	send("after", 30, 8*time.Second)
	waitFor(t, 40*time.Second, "every delayed message delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(due)
	})
	mu.Lock()
	defer mu.Unlock()
	for id, at := range due {
		if len(got[id]) != 1 {
			t.Fatalf("%s delivered %d times", id, len(got[id]))
		}
		if got[id][0].Before(at) {
			t.Fatalf("%s delivered %v early", id, at.Sub(got[id][0]))
		}
	}
}

package metaserver_test

// End-to-end tests with the real realtime broker, producer and consumer,
// all in this process and all finding each other through the meta server.
// They are an external test package: the meta server package itself never
// imports a broker.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/devetcd"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"

	"github.com/qmq-go/qmq/pkg/testutil"
)

// TestE2E_SendAndReceiveThroughEtcdOutage: two realtime brokers registered
// with a meta server; a producer and a consumer resolve through metaclient.
// etcd stops; messages sent during the outage are all stored and received,
// on the routes the clients had cached.
// e2eCluster is a meta server (on its own embedded etcd) with two realtime
// brokers registered through metaclient, and a metaclient for clients.
type e2eCluster struct {
	meta     *metaserver.Server
	brokers  map[string]*realtime.Broker
	mc       *metaclient.Client
	stopEtcd func()
}

func startE2ECluster(t *testing.T) *e2eCluster {
	t.Helper()
	e, err := devetcd.Start(devetcd.Options{Dir: t.TempDir(), Fast: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var etcdOnce sync.Once
	stopEtcd := func() { etcdOnce.Do(e.Close) }
	t.Cleanup(stopEtcd)
	o := metaserver.NewOptions()
	o.Addr, o.HTTPAddr, o.EtcdEndpoints, o.AdminToken = "127.0.0.1:0", "127.0.0.1:0", e.Endpoints(), "t"
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
	brokers := map[string]*realtime.Broker{}

	for _, g := range []string{"rt1", "rt2"} {
		bo := realtime.NewOptions()
		bo.Group, bo.Addr, bo.HTTPAddr, bo.DataDir, bo.SegmentSize = g, "127.0.0.1:0", "", t.TempDir(), 8<<20
		b, err := realtime.New(bo, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close(ctx) })
		reg, err := metaclient.Register(ctx, metas, metaclient.Broker{
			Kind: protocol.KindRealtime, Role: protocol.RoleMaster, Group: g, Address: b.Addr().String(),
		}, metaclient.WithRequestTimeout(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = reg.Close(ctx) })
		brokers[g] = b
	}
	// A route is assigned on first use from the groups the meta server sees
	// then: wait until it sees both, or the route may keep only one.
	admin := api.NewClient(s.HTTPAddr().String(), "", 2*time.Second)
	for wait := time.Now().Add(10 * time.Second); ; {
		if gs, err := admin.Groups(ctx); err == nil && len(gs) == 2 {
			break
		}
		if time.Now().After(wait) {
			t.Fatal("the meta server never listed both broker groups")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mc, err := metaclient.New(metas, "e2e", metaclient.WithRefreshInterval(200*time.Millisecond), metaclient.WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := mc.Lookup(ctx, protocol.ClientProducer, "orders", "")
		if err == nil && len(r.Writable()) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("route never had both groups: %+v, %v", r, err)
		}
		mc.Refresh(protocol.ClientProducer, "orders", "")
		time.Sleep(50 * time.Millisecond)
	}

	return &e2eCluster{meta: s, brokers: brokers, mc: mc, stopEtcd: stopEtcd}
}

func TestE2E_SendAndReceiveThroughEtcdOutage(t *testing.T) {
	t.Parallel()
	cl := startE2ECluster(t)
	mc, stopEtcd, ctx := cl.mc, cl.stopEtcd, context.Background()
	var mu sync.Mutex
	received := map[string]string{} // message id → broker group
	c, err := consumer.New(consumer.WithResolver(mc), consumer.WithConsumerID("e2e-consumer"), consumer.WithRouteRefresh(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(ctx) })
	if _, err := c.Subscribe("orders", "billing", func(_ context.Context, m *consumer.Message) error {
		mu.Lock()
		received[m.ID] = m.BrokerGroup
		mu.Unlock()
		return nil
	}, consumer.StartEarliest()); err != nil { // the group may reach a broker after the first sends
		t.Fatal(err)
	}
	p, err := producer.New(producer.WithResolver(mc), producer.WithSendTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(ctx) })

	var failed atomic.Int64
	send := func(prefix string, n int) {
		for i := range n {
			if err := p.Send(ctx, &producer.Message{Subject: "orders", ID: fmt.Sprintf("%s-%d", prefix, i), Body: []byte("x")}); err != nil {
				failed.Add(1)
				t.Logf("send %s-%d: %v", prefix, i, err)
			}
		}
	}
	waitReceived := func(n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			got := len(received)
			mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("received %d of %d messages", got, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	send("before", 200)
	waitReceived(200)

	stopEtcd()
	time.Sleep(time.Second) // several failed refreshes and heartbeats
	send("during", 200)
	waitReceived(400)
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d sends failed", n)
	}
	mu.Lock()
	defer mu.Unlock()
	groups := map[string]int{}
	for i := range 200 {
		g, ok := received[fmt.Sprintf("during-%d", i)]
		if !ok {
			t.Fatalf("during-%d was not received", i)
		}
		groups[g]++
	}
	if len(groups) != 2 {
		t.Fatalf("messages sent during the outage went to %v, want both groups", groups)
	}
	t.Logf("during the etcd outage: 200 sent and received, per broker group %v", groups)
}

// TestE2E_AdminAgainstRealBrokers exercises the relayed admin actions and
// readonly routing with real brokers: backlog per consumer group, offset
// resets, dead-letter listing, and a broker that turns itself readonly.
func TestE2E_AdminAgainstRealBrokers(t *testing.T) {
	t.Parallel()
	cl := startE2ECluster(t)
	ctx := context.Background()
	admin := api.NewClient(cl.meta.HTTPAddr().String(), "t", 5*time.Second)
	p, err := producer.New(producer.WithResolver(cl.mc), producer.WithSendTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(ctx) })
	send := func(prefix string, n int) {
		t.Helper()
		for i := range n {
			if err := p.Send(ctx, &producer.Message{Subject: "orders", ID: fmt.Sprintf("%s-%d", prefix, i), Body: []byte("x")}); err != nil {
				t.Fatalf("send %s-%d: %v", prefix, i, err)
			}
		}
	}
	// Create the consumer group "billing" and drain it.
	var got atomic.Int64
	c, err := consumer.New(consumer.WithResolver(cl.mc), consumer.WithConsumerID("admin-e2e"), consumer.WithRouteRefresh(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe("orders", "billing", func(context.Context, *consumer.Message) error { got.Add(1); return nil },
		consumer.StartEarliest()); err != nil {
		t.Fatal(err)
	}
	send("a", 100)
	waitFor(t, 20*time.Second, "100 received", func() bool { return got.Load() >= 100 })
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	backlog := func() uint64 {
		gs, err := admin.Consumers(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gs {
			if g.Group == "billing" {
				if len(g.Errors) > 0 {
					t.Fatalf("broker errors: %+v", g.Errors)
				}
				return g.Backlog
			}
		}
		t.Fatalf("no billing group in %+v", gs)
		return 0
	}
	waitFor(t, 10*time.Second, "backlog 0 after draining", func() bool { return backlog() == 0 })
	send("b", 50)
	waitFor(t, 10*time.Second, "backlog 50", func() bool { return backlog() == 50 })
	if r, err := admin.ResetOffset(ctx, "orders", "billing", "latest"); err != nil || len(r.OK) != 2 {
		t.Fatalf("reset latest: %+v, %v", r, err)
	}
	if b := backlog(); b != 0 {
		t.Fatalf("backlog %d after reset to latest", b)
	}
	if r, err := admin.ResetOffset(ctx, "orders", "billing", "earliest"); err != nil || len(r.OK) != 2 {
		t.Fatalf("reset earliest: %+v, %v", r, err)
	}
	if b := backlog(); b != 150 {
		t.Fatalf("backlog %d after reset to earliest, want 150", b)
	}
	d, err := admin.DeadLetters(ctx, "orders", "billing", 0, 10)
	if err != nil || d.Total != 0 || len(d.Errors) != 0 {
		t.Fatalf("dead letters of a clean group: %+v, %v", d, err)
	}

	// rt1 reports itself readonly: sends go on, all to rt2.
	stored := func(group string) uint64 {
		gs, err := admin.Consumers(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gs {
			for _, pb := range g.PerBroker {
				if g.Group == "billing" && pb.BrokerGroup == group {
					return pb.Messages
				}
			}
		}
		return 0
	}
	rt1, rt2 := stored("rt1"), stored("rt2")
	cl.brokers["rt1"].SetReadonly(true)
	send("c", 100)
	if n := stored("rt1"); n != rt1 {
		t.Fatalf("readonly rt1 stored %d more messages", n-rt1)
	}
	if n := stored("rt2"); n != rt2+100 {
		t.Fatalf("rt2 stored %d more messages, want 100", n-rt2)
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, timeout, what, cond)
}

// e2eBrokerEnv makes the test binary run a real realtime broker process
// (see init): the value is "group,meta address,data dir".
const e2eBrokerEnv = "QMQ_E2E_BROKER"

func init() {
	if v := os.Getenv(e2eBrokerEnv); v != "" {
		os.Exit(runE2EBroker(strings.Split(v, ",")))
	}
}

// runE2EBroker runs a realtime broker that registers itself with the meta
// server (its own wiring, realtime.Options.MetaServers), prints its address
// and serves until killed.
func runE2EBroker(args []string) int {
	o := realtime.NewOptions()
	o.Group, o.MetaServers, o.DataDir = args[0], []string{args[1]}, args[2]
	o.Addr, o.HTTPAddr, o.SegmentSize = "127.0.0.1:0", "", 8<<20
	b, err := realtime.New(o, nil)
	if err == nil {
		err = b.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "broker:", err)
		return 1
	}
	fmt.Println(b.Addr())
	select {}
}

// TestE2E_SIGKILLedBrokerUnderLoad runs three real brokers as processes that
// register themselves, sends steadily through the producer, SIGKILLs one
// broker, and checks that no send fails and that the producers route around
// the dead group within the lease TTL plus 2 s.
func TestE2E_SIGKILLedBrokerUnderLoad(t *testing.T) {
	// Not parallel: the timing it checks should not compete with other tests.
	const ttl = 2 * time.Second
	e, err := devetcd.Start(devetcd.Options{Dir: t.TempDir(), Fast: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	o := metaserver.NewOptions()
	o.Addr, o.HTTPAddr, o.EtcdEndpoints, o.AdminToken = "127.0.0.1:0", "127.0.0.1:0", e.Endpoints(), "t"
	o.BrokerTTL, o.MinGroups = ttl, 3
	s, err := metaserver.New(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() { _ = s.Close(ctx) })
	meta := s.Addr().String()
	procs := map[string]*exec.Cmd{}
	for _, g := range []string{"rt1", "rt2", "rt3"} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), e2eBrokerEnv+"="+g+","+meta+","+t.TempDir())
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
			t.Fatalf("broker %s did not start: %v", g, err)
		}
		procs[g] = cmd
	}
	mc, err := metaclient.New([]string{meta}, "e2e-producer", metaclient.WithRefreshInterval(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Close() })
	// The brokers register in the background: wait for all three before
	// the subject's first lookup assigns its route.
	waitFor(t, 15*time.Second, "three registered groups", func() bool {
		gs, err := api.NewClient(s.HTTPAddr().String(), "", time.Second).Groups(ctx)
		return err == nil && len(gs) == 3
	})
	if r, err := mc.Lookup(ctx, protocol.ClientProducer, "orders", ""); err != nil || len(r.Writable()) != 3 {
		t.Fatalf("route %+v, %v: want three writable groups", r, err)
	}
	p, err := producer.New(producer.WithResolver(mc), producer.WithSendTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(ctx) })
	var sent, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := p.Send(ctx, &producer.Message{Subject: "orders", ID: fmt.Sprintf("k-%d-%d", w, i), Body: []byte("x")}); err != nil {
					failed.Add(1)
					t.Logf("send failed: %v", err)
					continue
				}
				sent.Add(1)
			}
		}()
	}
	stopLoad := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	t.Cleanup(stopLoad)
	waitFor(t, 10*time.Second, "steady load", func() bool { return sent.Load() > 500 })

	killed := time.Now()
	if err := procs["rt1"].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ttl+5*time.Second, "the producers' route to drop rt1", func() bool {
		r, err := mc.Lookup(ctx, protocol.ClientProducer, "orders", "")
		return err == nil && len(r.Writable()) == 2
	})
	failover := time.Since(killed)
	before := sent.Load()
	waitFor(t, 5*time.Second, "sends to go on", func() bool { return sent.Load() > before+200 })
	stopLoad()
	t.Logf("SIGKILL to rt1: producers off it after %v (TTL %v); %d sends, %d failed", failover, ttl, sent.Load(), failed.Load())
	if failover > ttl+2*time.Second {
		t.Errorf("failover took %v, over TTL + 2s", failover)
	}
	if n := failed.Load(); n != 0 {
		t.Errorf("%d sends failed", n)
	}
}

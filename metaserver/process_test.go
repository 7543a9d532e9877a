package metaserver

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"github.com/qmq-go/qmq/producer"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/devetcd"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
)

// TestMain lets the test binary play a broker process: with
// QMQ_TEST_BROKER_META set it registers a realtime master with that meta
// server through metaclient, prints "registered", and heartbeats until it
// is killed.
//
// The package's tests mostly wait (for leases to expire, etcd to start and
// stop, brokers to answer), so unless -test.parallel is given they run six
// at a time rather than GOMAXPROCS (two here) at a time.
func TestMain(m *testing.M) {
	if meta := os.Getenv("QMQ_TEST_BROKER_META"); meta != "" {
		os.Exit(runTestBroker(meta, os.Getenv("QMQ_TEST_BROKER_GROUP")))
	}
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "6")
	}
	os.Exit(m.Run())
}

func runTestBroker(meta, group string) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer ln.Close()
	reg, err := metaclient.Register(context.Background(), []string{meta}, metaclient.Broker{
		Kind: protocol.KindRealtime, Role: protocol.RoleMaster, Group: group, Address: ln.Addr().String(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("registered %d\n", reg.LeaseID())
	select {} // heartbeat until killed
}

// TestServer_SIGKILLedBrokerLeavesRoutesWithinTTL runs a broker as a child
// process, kills it with SIGKILL, and checks its group turns unavailable in
// lookups within the lease TTL (plus a little for the watch).
func TestServer_SIGKILLedBrokerLeavesRoutesWithinTTL(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	s := startServer(t, startEtcd(t), func(o *Options) { o.BrokerTTL = ttl })
	c := newClient(t)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "QMQ_TEST_BROKER_META="+s.Addr().String(), "QMQ_TEST_BROKER_GROUP=doomed")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "registered") {
		t.Fatalf("broker process said %q, %v", line, err)
	}
	eventually(t, 10*time.Second, "the broker's group writable", func() bool {
		resp, err := c.lookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
		return err == nil && groupState(resp, "doomed") == protocol.GroupReadWrite
	})
	// Let a few heartbeats pass so the kill lands mid-lease.
	time.Sleep(ttl)

	killed := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var gone time.Duration
	eventually(t, ttl+3*time.Second, "the killed broker's group to become unavailable", func() bool {
		resp := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
		for _, g := range resp.Groups {
			if g.Group == "doomed" && g.State == protocol.GroupUnavailable {
				gone = time.Since(killed)
				return true
			}
		}
		return false
	})
	t.Logf("group unavailable %v after SIGKILL (TTL %v)", gone, ttl)
	// The lease expires at most one TTL after the last heartbeat, which
	// came before the kill; the watch and this poll add a little, more on a
	// loaded machine.
	if gone > ttl+2*time.Second {
		t.Fatalf("the killed broker stayed in routes %v, over TTL %v + 2s", gone, ttl)
	}
}

// TestServer_EtcdOutage stops etcd under a running meta server: lookups of
// known routes keep being served from the view, a metaclient keeps its
// routes, registrations fail cleanly with "unavailable", /readyz says not
// ready; when etcd comes back the server catches up by itself.
func TestServer_EtcdOutage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clientAddr, peerAddr := testutil.ReusableAddr(t), testutil.ReusableAddr(t)
	e, err := devetcd.Start(devetcd.Options{Dir: dir, ClientAddr: clientAddr, PeerAddr: peerAddr, Fast: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, e.Endpoints(), func(o *Options) { o.EtcdTimeout = time.Second; o.BrokerTTL = 10 * time.Second })
	c := newClient(t)
	b1, b2 := startFakeBroker(t, "g1"), startFakeBroker(t, "g2")
	c.mustRegister(s, master("g1", b1.addr()))
	c.mustRegister(s, master("g2", b2.addr()))
	eventually(t, 5*time.Second, "two groups", func() bool { return len(s.groups()) == 2 })
	before := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
	mc, err := metaclient.New([]string{s.Addr().String()}, "outage-test", metaclient.WithRefreshInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	ctx := context.Background()
	if _, err := mc.Lookup(ctx, protocol.ClientProducer, "orders", ""); err != nil {
		t.Fatal(err)
	}
	// A producer sends through the whole outage on its cached route.
	p, err := producer.New(producer.WithResolver(mc), producer.WithSendTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	var sent, failed atomic.Int64
	loadStop, loadDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(loadDone)
		for i := 0; ; i++ {
			select {
			case <-loadStop:
				return
			case <-time.After(time.Millisecond):
			}
			if err := p.Send(ctx, &producer.Message{Subject: "orders", ID: fmt.Sprintf("o-%d", i), Body: []byte("x")}); err != nil {
				failed.Add(1)
				continue
			}
			sent.Add(1)
		}
	}()
	stopLoad := func() {
		select {
		case <-loadStop:
		default:
			close(loadStop)
		}
		<-loadDone
	}
	defer stopLoad()
	eventually(t, 5*time.Second, "sends flowing", func() bool { return sent.Load() > 20 })

	start := time.Now()
	e.Close()
	base := "http://" + s.HTTPAddr().String()
	eventually(t, 10*time.Second, "/readyz to report the lost watch", func() bool {
		return strings.Contains(httpGet(t, base+"/readyz"), "not ready")
	})
	t.Logf("not ready after %v", time.Since(start))
	for range 20 {
		got, err := c.lookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
		if err != nil || !sameGroups(got.Groups, before.Groups) {
			t.Fatalf("lookup during the etcd outage: %+v, %v", got, err)
		}
		r, err := mc.Lookup(ctx, protocol.ClientProducer, "orders", "")
		if err != nil || len(r.Writable()) != 2 {
			t.Fatalf("metaclient lookup during the outage: %+v, %v", r, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := c.register(s, master("g3", "127.0.0.1:1003")); err == nil || !strings.Contains(err.Error(), "unavailable") {
		t.Fatalf("registration during the outage: err %v, want unavailable", err)
	}
	if _, err := c.lookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "brand-new"}); err == nil {
		t.Fatal("a new route was assigned while etcd was down")
	}

	duringOutage := b1.sent.Load() + b2.sent.Load()
	eventually(t, 5*time.Second, "sends to go on during the outage", func() bool { return b1.sent.Load()+b2.sent.Load() > duringOutage+50 })
	t.Logf("outage checks done after %v", time.Since(start))
	e2, err := devetcd.Start(devetcd.Options{Dir: dir, ClientAddr: clientAddr, PeerAddr: peerAddr, Fast: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	eventually(t, 15*time.Second, "/readyz after etcd is back", func() bool { return strings.Contains(httpGet(t, base+"/readyz"), "ok") })
	t.Logf("ready again after %v", time.Since(start))
	eventually(t, 10*time.Second, "registration after etcd is back", func() bool {
		_, err := c.register(s, master("g3", "127.0.0.1:1003"))
		return err == nil
	})
	eventually(t, 5*time.Second, "g3 in the view", func() bool { return len(s.groups()) == 3 })
	stopLoad()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of %d sends failed across the etcd outage", n, n+sent.Load())
	}
	t.Logf("%d sends across the etcd outage, none failed", sent.Load())
	_ = s.Close(ctx) // before etcd, so etcd's close need not wait for the watch
}

package metaserver

import (
	"context"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// TestMetaclient_ProducerRoutesFollowReadonlyAndDeadGroups checks the part
// of "producer traffic moves off a group that dies or is marked readonly"
// that needs no broker: a producer's metaclient, refreshed early as a
// producer does on a readonly or failed send, drops the group from its
// writable set within moments, and consumers keep reading a readonly group.
func TestMetaclient_ProducerRoutesFollowReadonlyAndDeadGroups(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), func(o *Options) { o.BrokerTTL = 2 * time.Second; o.MinGroups = 3 })
	ctx := context.Background()
	// g1 and g3 heartbeat through metaclient; g2 through a loop the test
	// stops without a goodbye, as a killed broker would.
	c := newClient(t)
	g2Stop, g2Done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(g2Done)
		req := master("g2", "127.0.0.1:12")
		for {
			if resp, err := c.register(s, req); err == nil {
				req.LeaseID = resp.LeaseID
			}
			select {
			case <-g2Stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	defer func() {
		select {
		case <-g2Stop:
		default:
			close(g2Stop)
		}
		<-g2Done
	}()
	var regs []*metaclient.Registration
	for _, g := range []string{"g1", "g3"} {
		r, err := metaclient.Register(ctx, []string{s.Addr().String()}, metaclient.Broker{
			Kind: protocol.KindRealtime, Role: protocol.RoleMaster, Group: g, Address: "127.0.0.1:1" + g[1:],
		})
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, r)
		t.Cleanup(func() { _ = r.Close(ctx) })
	}
	eventually(t, 5*time.Second, "three groups", func() bool { return len(s.groups()) == 3 })
	mc, err := metaclient.New([]string{"127.0.0.1:1", s.Addr().String()}, "producer-1", // the first meta server is dead
		metaclient.WithRefreshInterval(time.Hour), metaclient.WithMinEarlyRefresh(0))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	writable := func() []string {
		r, err := mc.Lookup(ctx, protocol.ClientProducer, "orders", "")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, g := range r.Writable() {
			out = append(out, g.Group)
		}
		return out
	}
	if w := writable(); len(w) != 3 {
		t.Fatalf("writable %v, want three groups", w)
	}

	// An admin marks g1 readonly; the producer's next send there fails with
	// ErrReadonly, it calls Refresh, and g1 leaves its writable set.
	if _, err := admin(s, testToken).MarkReadonly(ctx, "g1", ""); err != nil {
		t.Fatal(err)
	}
	marked := time.Now()
	eventually(t, 2*time.Second, "g1 out of the writable set", func() bool {
		mc.Refresh(protocol.ClientProducer, "orders", "")
		w := writable()
		return len(w) == 2 && w[0] != "g1" && w[1] != "g1"
	})
	t.Logf("readonly g1 left the producer's writable set %v after the mark", time.Since(marked))
	cr, err := mc.Lookup(ctx, protocol.ClientConsumer, "orders", "billing")
	if err != nil || len(cr.Readable()) != 3 {
		t.Fatalf("consumer readable set %+v, %v: want all three", cr.Readable(), err)
	}

	// g2's broker dies (its heartbeats stop without a goodbye): within the
	// TTL g2 leaves the writable set too.
	close(g2Stop)
	<-g2Done
	died := time.Now()
	eventually(t, 2*time.Second+2*time.Second, "g2 out of the writable set", func() bool {
		mc.Refresh(protocol.ClientProducer, "orders", "")
		w := writable()
		return len(w) == 1 && w[0] == "g3"
	})
	t.Logf("dead g2 left the producer's writable set %v after its last heartbeat (TTL 2s)", time.Since(died))

	// A clean shutdown leaves at once.
	if err := regs[1].Close(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Second, "g3 out of the writable set", func() bool {
		mc.Refresh(protocol.ClientProducer, "orders", "")
		return len(writable()) == 0
	})
}

// TestMetaclient_ConsumerRegistration registers a consumer through
// metaclient with a real meta server: the admin API lists it, an admin
// takes it offline and the consumer learns so, and Close unregisters it.
func TestMetaclient_ConsumerRegistration(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), func(o *Options) { o.ClientTTL = 3 * time.Second })
	c := newClient(t)
	c.mustRegister(s, master("g1", "127.0.0.1:1001"))
	eventually(t, 5*time.Second, "g1", func() bool { return len(s.groups()) == 1 })
	ctx := context.Background()
	mc, err := metaclient.New([]string{s.Addr().String()}, "consumer-1")
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if _, err := mc.Lookup(ctx, protocol.ClientConsumer, "orders", "billing"); err != nil {
		t.Fatal(err)
	}
	reg := mc.RegisterConsumer("orders", "billing", "consumer-1")
	if !reg.Registered() {
		t.Fatal("first heartbeat failed")
	}
	cl := admin(s, testToken)
	eventually(t, 5*time.Second, "the consumer listed", func() bool {
		gs, err := cl.Consumers(ctx, "orders")
		return err == nil && len(gs) == 1 && len(gs[0].Consumers) == 1 && gs[0].Consumers[0].ClientID == "consumer-1"
	})
	if _, err := cl.SetConsumerOnline(ctx, "orders", "billing", "consumer-1", false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, "the consumer to learn it is offline (heartbeat every TTL/3)", reg.Offline)
	// Registered for longer than its TTL: the heartbeats keep it alive.
	time.Sleep(3 * time.Second)
	if gs, err := cl.Consumers(ctx, "orders"); err != nil || len(gs) != 1 || len(gs[0].Consumers) != 1 {
		t.Fatalf("consumer gone while heartbeating: %+v, %v", gs, err)
	}
	reg.Close()
	eventually(t, 2*time.Second, "the consumer unregistered at once", func() bool {
		gs, err := cl.Consumers(ctx, "orders")
		return err == nil && (len(gs) == 0 || len(gs[0].Consumers) == 0)
	})
}

package metaserver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// The master registration is the group's election: one holder at a time,
// an epoch that grows with every election and stays with heartbeats, the
// slave learning it, and a promoted slave freeing the slave seat for the
// old master.
func TestServer_ElectionEpochs(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), func(o *Options) { o.BrokerTTL = 2 * time.Second })
	c := newClient(t)

	m := master("g1", "127.0.0.1:1001")
	first := c.mustRegister(s, m)
	if first.Epoch == 0 || first.Master != m.Address {
		t.Fatalf("first master registration %+v: want a non-zero epoch and its own address", first)
	}
	m.LeaseID = first.LeaseID
	if again := c.mustRegister(s, m); again.Epoch != first.Epoch {
		t.Fatalf("heartbeat epoch %d, want the election's %d", again.Epoch, first.Epoch)
	}
	slave := master("g1", "127.0.0.1:1501")
	slave.Role, slave.BrokerID = protocol.RoleSlave, "g1-s"
	sr := c.mustRegister(s, slave)
	if sr.Master != m.Address || sr.Epoch != first.Epoch {
		t.Fatalf("slave registration %+v: want master %s at epoch %d", sr, m.Address, first.Epoch)
	}
	eventually(t, 5*time.Second, "the epoch in lookups", func() bool {
		l := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
		return len(l.Groups) == 1 && l.Groups[0].Epoch == first.Epoch && l.Groups[0].Master == m.Address
	})

	// A slave the master never recorded as eligible cannot take the group,
	// not even once the seat is free; the master records it.
	if set := c.mustEligible(s, protocol.EligibleRequest{Group: "g1", BrokerID: m.BrokerID, Epoch: first.Epoch, Slave: slave.BrokerID}); set.Slave != slave.BrokerID {
		t.Fatalf("eligible set %+v, want slave %s", set, slave.BrokerID)
	}
	// While the master's lease lives, the slave cannot take the group.
	elect := master("g1", slave.Address)
	elect.BrokerID = slave.BrokerID
	if _, err := c.register(s, elect); !errors.Is(err, protocol.ErrNotMaster) {
		t.Fatalf("slave's election while the master lives: err %v, want ErrNotMaster", err)
	}
	// The master stops heartbeating; the slave keeps its own lease alive
	// and wins once the master's lease is gone.
	slave.LeaseID = sr.LeaseID
	var won protocol.RegisterResponse
	eventually(t, 10*time.Second, "the slave elected after the master's lease expired", func() bool {
		if _, err := c.register(s, slave); err != nil {
			t.Logf("slave heartbeat: %v", err)
		}
		r, err := c.register(s, elect)
		if err != nil {
			if !errors.Is(err, protocol.ErrNotMaster) {
				t.Fatalf("election: err %v, want ErrNotMaster until the lease expires", err)
			}
			return false
		}
		won = r
		return true
	})
	if won.Epoch <= first.Epoch || won.Master != elect.Address {
		t.Fatalf("new master %+v: want a larger epoch than %d and its own address", won, first.Epoch)
	}
	eventually(t, 5*time.Second, "the slave seat freed and the new master routed", func() bool {
		s.view.mu.RLock()
		_, seated := s.view.brokers[brokerKey{"g1", protocol.RoleSlave}]
		s.view.mu.RUnlock()
		l := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
		return !seated && len(l.Groups) == 1 && l.Groups[0].Master == elect.Address && l.Groups[0].Epoch == won.Epoch
	})

	// The old master comes back: it cannot be master; it rejoins as the
	// slave and learns the new epoch.
	m.LeaseID = 0
	if _, err := c.register(s, m); !errors.Is(err, protocol.ErrNotMaster) {
		t.Fatalf("old master's heartbeat after the election: err %v, want ErrNotMaster", err)
	}
	old := m
	old.Role = protocol.RoleSlave
	if r := c.mustRegister(s, old); r.Master != elect.Address || r.Epoch != won.Epoch {
		t.Fatalf("old master rejoining as slave: %+v, want master %s epoch %d", r, elect.Address, won.Epoch)
	}
}

// A broker's metaclient.Registration reports its epoch and when its lease
// was last renewed, and a deposed master learns it from its heartbeat's
// error.
func TestMetaclient_RegistrationEpochAndRenewal(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), func(o *Options) { o.BrokerTTL = 2 * time.Second })
	ctx := context.Background()
	addrs := []string{s.Addr().String()}
	before := time.Now()
	m, err := metaclient.Register(ctx, addrs, metaclient.Broker{Kind: protocol.KindRealtime, Role: protocol.RoleMaster,
		Group: "g1", BrokerID: "m", Address: "127.0.0.1:1001"}, metaclient.WithHeartbeatInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Close(ctx) }()
	if m.Epoch() == 0 || m.RenewedAt().Before(before) || m.Err() != nil {
		t.Fatalf("master registration: epoch %d renewed %v (registered after %v) err %v", m.Epoch(), m.RenewedAt(), before, m.Err())
	}
	first := m.RenewedAt()
	eventually(t, 5*time.Second, "heartbeats renew the lease", func() bool { return m.RenewedAt().After(first) })

	// A second master is refused with ErrNotMaster.
	_, err = metaclient.Register(ctx, addrs, metaclient.Broker{Kind: protocol.KindRealtime, Role: protocol.RoleMaster,
		Group: "g1", BrokerID: "s", Address: "127.0.0.1:1002"})
	if !errors.Is(err, protocol.ErrNotMaster) {
		t.Fatalf("second master: err %v, want ErrNotMaster", err)
	}
	sl, err := metaclient.Register(ctx, addrs, metaclient.Broker{Kind: protocol.KindRealtime, Role: protocol.RoleSlave,
		Group: "g1", BrokerID: "s", Address: "127.0.0.1:1002"}, metaclient.WithHeartbeatInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sl.Close(ctx) }()
	if sl.Epoch() != m.Epoch() || sl.Master() != "127.0.0.1:1001" {
		t.Fatalf("slave sees master %q epoch %d, want 127.0.0.1:1001 epoch %d", sl.Master(), sl.Epoch(), m.Epoch())
	}

	// The master records the slave as eligible, then leaves (a
	// switchover): it releases the group to the slave, which is elected
	// with a larger epoch and frees the slave seat.
	if set, err := m.SetEligible(ctx, "s", false); err != nil || set.Slave != "s" {
		t.Fatalf("eligible set %+v, %v", set, err)
	}
	oldEpoch := m.Epoch()
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the slave sees no master and the group released to it", func() bool {
		set := sl.Set()
		return sl.Master() == "" && set.Eligible && set.Released
	})
	nm, err := metaclient.Register(ctx, addrs, metaclient.Broker{Kind: protocol.KindRealtime, Role: protocol.RoleMaster,
		Group: "g1", BrokerID: "s", Address: "127.0.0.1:1002"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nm.Close(ctx) }()
	if nm.Epoch() <= oldEpoch {
		t.Fatalf("new epoch %d, want more than %d", nm.Epoch(), oldEpoch)
	}
	_ = sl.Close(ctx)
	// The old master, back as master, is refused; its heartbeat error says
	// so; as a slave it learns the new master and epoch.
	_, err = metaclient.Register(ctx, addrs, metaclient.Broker{Kind: protocol.KindRealtime, Role: protocol.RoleMaster,
		Group: "g1", BrokerID: "m", Address: "127.0.0.1:1001"})
	if !errors.Is(err, protocol.ErrNotMaster) {
		t.Fatalf("old master: err %v, want ErrNotMaster", err)
	}
	back, err := metaclient.Register(ctx, addrs, metaclient.Broker{Kind: protocol.KindRealtime, Role: protocol.RoleSlave,
		Group: "g1", BrokerID: "m", Address: "127.0.0.1:1001"})
	if err != nil {
		t.Fatalf("old master rejoining as slave: %v", err)
	}
	defer func() { _ = back.Close(ctx) }()
	if back.Master() != "127.0.0.1:1002" || back.Epoch() != nm.Epoch() {
		t.Fatalf("rejoined slave sees %q epoch %d, want 127.0.0.1:1002 epoch %d", back.Master(), back.Epoch(), nm.Epoch())
	}
}

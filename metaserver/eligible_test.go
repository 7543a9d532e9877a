package metaserver

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/metaserver/ctl"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// The eligible set decides who may take a group (pkg/failover): a fresh
// slave never, the eligible slave only from a master that does not answer,
// a takeover only in sync mode and only from a master that does not
// answer; a deposed master cannot change the set; a master whose lease
// lapsed takes its seat again with its eligible slave kept.
func TestElection_EligibleSetRules(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), func(o *Options) { o.BrokerTTL = 2 * time.Second })
	c := newClient(t)
	m := startFakeBroker(t, "g1") // answers pings while it runs
	mReq := master("g1", m.addr())
	mReq.Flags = protocol.RegisterSync
	first := c.mustRegister(s, mReq)
	mReq.LeaseID = first.LeaseID
	slaveReq := func(id, addr string) protocol.RegisterRequest {
		return protocol.RegisterRequest{Kind: protocol.KindRealtime, Role: protocol.RoleSlave, State: protocol.GroupReadonly,
			Group: "g1", BrokerID: id, Address: addr, Epoch: first.Epoch}
	}
	asMaster := func(id, addr string, flags uint8, epoch uint64) protocol.RegisterRequest {
		r := master("g1", addr)
		r.BrokerID, r.Flags, r.Epoch = id, flags, epoch
		return r
	}
	refused := func(what string, r protocol.RegisterRequest, says string) {
		t.Helper()
		_, err := c.register(s, r)
		if !errors.Is(err, protocol.ErrNotMaster) || !strings.Contains(err.Error(), says) {
			t.Fatalf("%s: err %v, want not master saying %q", what, err, says)
		}
	}
	sr := c.mustRegister(s, slaveReq("g1-s", "127.0.0.1:1501"))
	if sr.Flags&protocol.RegisterEligible != 0 || sr.Flags&protocol.RegisterHasSet == 0 || sr.Flags&protocol.RegisterSyncSet == 0 {
		t.Fatalf("a slave of a new sync group: flags %b, want a sync set it is not eligible in", sr.Flags)
	}
	// A takeover by a slave that is not eligible is refused.
	refused("takeover by a slave never recorded", asMaster("g1-s", "127.0.0.1:1501", protocol.RegisterTakeover, first.Epoch), "not its eligible slave")

	// The master records the slave; a deposed or stale request cannot.
	if _, err := c.eligible(s, protocol.EligibleRequest{Group: "g1", BrokerID: "g1-s", Epoch: first.Epoch, Slave: "x"}); !errors.Is(err, protocol.ErrNotMaster) {
		t.Fatalf("a broker that is not the master changed the set: %v", err)
	}
	if _, err := c.eligible(s, protocol.EligibleRequest{Group: "g1", BrokerID: "g1-m", Epoch: first.Epoch - 1, Slave: "x"}); !errors.Is(err, protocol.ErrStaleEpoch) {
		t.Fatalf("the master at an older epoch changed the set: %v", err)
	}
	c.mustEligible(s, protocol.EligibleRequest{Group: "g1", BrokerID: "g1-m", Epoch: first.Epoch, Flags: protocol.RegisterSync, Slave: "g1-s"})
	eventually(t, 5*time.Second, "the slave told it is eligible", func() bool {
		r, err := c.register(s, slaveReq("g1-s", "127.0.0.1:1501"))
		return err == nil && r.Flags&protocol.RegisterEligible != 0 && r.EligibleSlave == "g1-s"
	})
	// A takeover while the master answers is refused, and so is one that
	// names another epoch.
	refused("takeover from a master that answers", asMaster("g1-s", "127.0.0.1:1501", protocol.RegisterTakeover, first.Epoch), "it answers")
	refused("takeover naming another epoch", asMaster("g1-s", "127.0.0.1:1501", protocol.RegisterTakeover, first.Epoch+1), "follows epoch")

	// The master's lease lapses while it still answers: neither the
	// eligible slave nor a fresh broker takes the seat; the master takes
	// it again at a new epoch with its slave kept.
	eventually(t, 10*time.Second, "the master's seat free", func() bool {
		_, err := c.register(s, asMaster("g1-s", "127.0.0.1:1501", 0, 0))
		return err != nil && strings.Contains(err.Error(), "still answers")
	})
	refused("a fresh broker on a free seat", asMaster("fresh", "127.0.0.1:1601", 0, 0), "belongs to broker g1-m")
	mReq.LeaseID = 0
	again := c.mustRegister(s, mReq)
	if again.Epoch <= first.Epoch || again.EligibleSlave != "g1-s" || again.Flags&protocol.RegisterOwnSet == 0 {
		t.Fatalf("the master back after its lease lapsed: %+v, want a new epoch with its eligible slave kept", again)
	}
	mReq.LeaseID = again.LeaseID

	// The master dies (stops answering, stops heartbeating): the eligible
	// slave takes the group over without waiting for the lease, and the
	// old master's registration is refused from then on.
	_ = m.srv.Close(context.Background())
	won := c.mustRegister(s, asMaster("g1-s", "127.0.0.1:1501", protocol.RegisterTakeover|protocol.RegisterSync, again.Epoch))
	if won.Epoch <= again.Epoch || won.Master != "127.0.0.1:1501" || won.EligibleSlave != "" {
		t.Fatalf("takeover: %+v, want a new epoch, its own address and no eligible slave", won)
	}
	refused("the old master's heartbeat after the takeover", mReq, "has a live master")
	if _, err := c.eligible(s, protocol.EligibleRequest{Group: "g1", BrokerID: "g1-m", Epoch: again.Epoch}); !errors.Is(err, protocol.ErrNotMaster) {
		t.Fatalf("the deposed master changed the set: %v", err)
	}
	metrics := metricsText(t, s)
	for _, want := range []string{`qmq_meta_takeovers_total{outcome="ok"} 1`, `qmq_meta_takeovers_total{outcome="refused"} 3`} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("/metrics lacks %s:\n%s", want, grepLines(metrics, "qmq_meta_takeovers"))
		}
	}
}

// A master's write state and its group's eligible set show in the API,
// qmqctl groups and the console; a forced failover lets a slave that is not
// eligible take a group whose master is gone.
func TestElection_WriteStateShownAndForcedFailover(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	c := newClient(t)
	g := startReplicatedGroup(t, s, c, "g1")
	hb := g.mReq
	hb.LeaseID, hb.WriteState, hb.WriteReason = g.mLease, protocol.WriteReadonly, "its eligible slave g1-s is gone and the eligible set cannot be shrunk"
	changed := time.Now()
	c.mustRegister(s, hb)
	eventually(t, time.Second, "the write state in the API within a second", func() bool {
		x := s.group("g1")
		return x.WriteState == "readonly" && x.WriteReason == hb.WriteReason && x.Eligible == "g1-s"
	})
	t.Logf("write state shown %v after the heartbeat", time.Since(changed).Round(time.Millisecond))
	var out, errOut bytes.Buffer
	if code := ctl.Main([]string{"--meta-http=" + s.HTTPAddr().String(), "groups"}, &out, &errOut); code != 0 {
		t.Fatalf("qmqctl groups: exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"WRITES", "ELIGIBLE", "readonly", "g1-s"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("qmqctl groups lacks %q:\n%s", want, out.String())
		}
	}
	if chromiumPath() != "" {
		ch := startChromium(t)
		ch.navigate("http://" + s.HTTPAddr().String() + "/#groups")
		ch.waitText("groups", "g1-s")
		eventually(t, 5*time.Second, "the console's writes and eligible cells", func() bool {
			return ch.eval("(document.querySelector('tr[data-group=g1] .writes')||{}).textContent||''") == "readonly" &&
				ch.eval("(document.querySelector('tr[data-group=g1] .eligible')||{}).textContent||''") == "g1-s"
		})
	}

	// A forced failover: refused while the master lives, then a fresh
	// slave takes the group of a master that is gone.
	a := admin(s, testToken)
	if _, err := a.ForceFailover(context.Background(), "g1"); err == nil || !strings.Contains(err.Error(), "live master") {
		t.Fatalf("forced failover with a live master: %v", err)
	}
	leave := g.mReq
	leave.Flags, leave.LeaseID = protocol.RegisterLeaving, g.mLease
	if _, err := c.eligible(s, protocol.EligibleRequest{Group: "g1", BrokerID: g.mReq.BrokerID, Epoch: g.mEpoch}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.register(s, leave); err != nil {
		t.Fatal(err)
	}
	fresh := protocol.RegisterRequest{Kind: protocol.KindRealtime, Role: protocol.RoleMaster, State: protocol.GroupReadWrite,
		Group: "g1", BrokerID: "g1-s", Address: g.slave.addr()}
	if _, err := c.register(s, fresh); !errors.Is(err, protocol.ErrNotMaster) {
		t.Fatalf("a slave that is not eligible took the group: %v", err)
	}
	var res api.ForcedFailover
	eventually(t, 5*time.Second, "the forced failover", func() bool {
		var err error
		res, err = a.ForceFailover(context.Background(), "g1")
		return err == nil
	})
	if res.Slave != "g1-s" || res.OldMaster != "g1-m" {
		t.Fatalf("forced failover: %+v", res)
	}
	if won := c.mustRegister(s, fresh); won.Epoch <= g.mEpoch {
		t.Fatalf("the forced slave won at epoch %d, not past %d", won.Epoch, g.mEpoch)
	}
	if !strings.Contains(metricsText(t, s), "qmq_meta_forced_failovers_total 1") {
		t.Fatal("/metrics does not count the forced failover")
	}
}

package metaserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/metaserver/ctl"
	"github.com/qmq-go/qmq/pkg/protocol"
)

func TestServer_RegisterLookupAndLeaseExpiry(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), func(o *Options) { o.BrokerTTL = 2 * time.Second })
	c := newClient(t)
	r1 := c.mustRegister(s, master("g1", "127.0.0.1:1001"))
	leases := map[string]int64{
		"g1": r1.LeaseID,
		"g2": c.mustRegister(s, master("g2", "127.0.0.1:1002")).LeaseID,
		"g3": c.mustRegister(s, master("g3", "127.0.0.1:1003")).LeaseID,
	}
	if r1.LeaseID == 0 || r1.TTL != 2*time.Second {
		t.Fatalf("register response %+v: want a lease and TTL 2s", r1)
	}
	eventually(t, 5*time.Second, "three groups in the view", func() bool { return len(s.groups()) == 3 })

	resp := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
	if len(resp.Groups) != 2 {
		t.Fatalf("new route has %d groups, want --min-groups 2: %+v", len(resp.Groups), resp.Groups)
	}
	for _, g := range resp.Groups {
		if g.State != protocol.GroupReadWrite || g.Master == "" || g.Kind != protocol.KindRealtime {
			t.Fatalf("group %+v: want rw with a master", g)
		}
	}
	// A second lookup (and one for a retry subject) returns the same route.
	again := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientConsumer, Subject: protocol.RetrySubject("orders", "billing"), Group: "billing", ClientID: "c1"})
	if !sameGroups(again.Groups, resp.Groups) {
		t.Fatalf("retry-subject lookup %+v differs from %+v", again.Groups, resp.Groups)
	}
	if again.Version < resp.Version || again.Version == 0 {
		t.Fatalf("versions %d then %d: want non-zero and not decreasing", resp.Version, again.Version)
	}

	// Heartbeats with the returned lease keep a group alive; the others
	// stop heartbeating and must become unavailable within the TTL.
	keep := resp.Groups[0].Group
	stopKeep := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		req := master(keep, "127.0.0.1:100"+keep[1:])
		for {
			resp, err := c.register(s, req)
			if err == nil {
				req.LeaseID = resp.LeaseID
			}
			select {
			case <-stopKeep:
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stopKeep); wg.Wait() }()
	start := time.Now()
	dead := resp.Groups[1].Group
	eventually(t, 2*time.Second+3*time.Second, "the silent group to become unavailable", func() bool {
		l := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
		for _, g := range l.Groups {
			if g.Group == dead {
				return g.State == protocol.GroupUnavailable && g.Master == ""
			}
		}
		return false
	})
	t.Logf("silent group unavailable %v after the last heartbeat (TTL 2s)", time.Since(start))
	l := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
	for _, g := range l.Groups {
		if g.Group == keep && g.State != protocol.GroupReadWrite {
			t.Fatalf("heartbeating group %s is %v", keep, g.State)
		}
	}
	// The silent broker comes back with its expired lease: it gets a new
	// lease and its group is writable again.
	back := master(dead, "127.0.0.1:100"+dead[1:])
	back.LeaseID = leases[dead]
	again2 := c.mustRegister(s, back)
	if again2.LeaseID == 0 || again2.LeaseID == back.LeaseID {
		t.Fatalf("re-registration kept lease %d, want a new one", again2.LeaseID)
	}
	eventually(t, 5*time.Second, "the returning group writable again", func() bool {
		return groupState(c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"}), dead) == protocol.GroupReadWrite
	})
}

func sameGroups(a, b []protocol.RouteGroup) bool {
	return slices.EqualFunc(a, b, func(x, y protocol.RouteGroup) bool { return x.Group == y.Group })
}

func TestServer_RegisterRejectsSecondMasterAndBadInput(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	c := newClient(t)
	c.mustRegister(s, master("g1", "127.0.0.1:1001"))
	other := master("g1", "127.0.0.1:2001")
	other.BrokerID = "impostor"
	if _, err := c.register(s, other); !errors.Is(err, protocol.ErrNotMaster) {
		t.Fatalf("second master of g1: err %v, want ErrNotMaster (the group has a master)", err)
	}
	// The same broker re-registering (a restart) is fine and keeps its lease
	// when it sends none.
	if _, err := c.register(s, master("g1", "127.0.0.1:1001")); err != nil {
		t.Fatalf("re-register: %v", err)
	}
	// A slave learns its master's address; lookups show both.
	slave := master("g1", "127.0.0.1:1501")
	slave.Role, slave.BrokerID = protocol.RoleSlave, "g1-s"
	if resp := c.mustRegister(s, slave); resp.Master != "127.0.0.1:1001" {
		t.Fatalf("slave registration answered master %q", resp.Master)
	}
	eventually(t, 5*time.Second, "the slave in lookups", func() bool {
		l := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientConsumer, Subject: "orders", Group: "billing", ClientID: "c"})
		return len(l.Groups) == 1 && l.Groups[0].Master == "127.0.0.1:1001" && l.Groups[0].Slave == "127.0.0.1:1501"
	})
	bad := []protocol.RegisterRequest{
		{Kind: 9, Role: protocol.RoleMaster, Group: "g", BrokerID: "b", Address: "h:1"},
		{Kind: protocol.KindRealtime, Role: 9, Group: "g", BrokerID: "b", Address: "h:1"},
		{Kind: protocol.KindRealtime, Role: protocol.RoleMaster, Group: "g/x", BrokerID: "b", Address: "h:1"},
		{Kind: protocol.KindRealtime, Role: protocol.RoleMaster, Group: "g", BrokerID: "", Address: "h:1"},
		{Kind: protocol.KindRealtime, Role: protocol.RoleMaster, Group: "g", BrokerID: "b", Address: "nohostport"},
		{Kind: protocol.KindRealtime, Role: protocol.RoleMaster, State: protocol.GroupUnavailable, Group: "g", BrokerID: "b", Address: "h:1"},
	}
	for i, r := range bad {
		if _, err := c.register(s, r); !errors.Is(err, protocol.ErrInvalid) {
			t.Errorf("bad registration %d: err %v, want ErrInvalid", i, err)
		}
	}
	if _, err := c.lookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "bad subject"}); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("lookup of a bad subject: err %v, want ErrInvalid", err)
	}
	if _, err := c.tr.Call(context.Background(), s.Addr().String(), protocol.CmdLookup, []byte{1, 2}); !errors.Is(err, protocol.ErrBadRequest) {
		t.Fatalf("truncated lookup: err %v, want ErrBadRequest", err)
	}
}

func TestServer_LeavingRemovesRegistrationAtOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), func(o *Options) { o.BrokerTTL = 30 * time.Second })
	c := newClient(t)
	c.mustRegister(s, master("g1", "127.0.0.1:1001"))
	eventually(t, 5*time.Second, "g1 registered", func() bool { return len(s.brokers()) == 1 })
	leave := master("g1", "127.0.0.1:1001")
	leave.Flags = protocol.RegisterLeaving
	c.mustRegister(s, leave)
	eventually(t, 5*time.Second, "g1 gone well before its 30s TTL", func() bool { return len(s.brokers()) == 0 })
}

func TestServer_NoWritableGroupIsUnavailable(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	c := newClient(t)
	if _, err := c.lookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"}); !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("lookup with no brokers: err %v, want ErrUnavailable", err)
	}
}

func TestServer_DelayProducersGetDelayGroups(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	c := newClient(t)
	c.mustRegister(s, master("rt1", "127.0.0.1:1001"))
	d := master("dl1", "127.0.0.1:1101")
	d.Kind = protocol.KindDelay
	c.mustRegister(s, d)
	eventually(t, 5*time.Second, "two groups", func() bool { return len(s.groups()) == 2 })
	rt := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
	dl := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientDelayProducer, Subject: "orders"})
	if len(rt.Groups) != 1 || rt.Groups[0].Group != "rt1" {
		t.Fatalf("realtime route %+v, want rt1 only", rt.Groups)
	}
	if len(dl.Groups) != 1 || dl.Groups[0].Group != "dl1" || dl.Groups[0].Kind != protocol.KindDelay {
		t.Fatalf("delay route %+v, want dl1 only", dl.Groups)
	}
	// qmqctl routes SUBJECT lists both, as qmqctl routes does.
	run := qmqctlRunner(t, s.HTTPAddr().String())
	for _, args := range [][]string{{"routes"}, {"routes", "orders"}} {
		out := run(0, args...)
		for _, want := range []string{"realtime", "rt1", "delay", "dl1"} {
			if !strings.Contains(out, want) {
				t.Fatalf("qmqctl %v lacks %q:\n%s", args, want, out)
			}
		}
	}
	run(ctl.ExitNotFound, "routes", "nosuch")
}

// TestServer_RouteAssignmentFromTwoServers races first lookups of the same
// new subjects on two meta servers sharing one etcd: every answer for a
// subject must name the same groups.
func TestServer_RouteAssignmentFromTwoServers(t *testing.T) {
	t.Parallel()
	eps := startEtcd(t)
	a := startServer(t, eps, nil)
	b := startServer(t, eps, nil)
	c := newClient(t)
	for i := 1; i <= 5; i++ {
		c.mustRegister(a, master(fmt.Sprintf("g%d", i), fmt.Sprintf("127.0.0.1:%d", 1000+i)))
	}
	eventually(t, 5*time.Second, "both views hold five groups", func() bool {
		return len(a.groups()) == 5 && len(b.groups()) == 5
	})
	const subjects, perServer = 20, 4
	type answer struct {
		subject string
		groups  []string
	}
	answers := make(chan answer, subjects*perServer*2)
	var wg sync.WaitGroup
	for i := range subjects {
		subject := fmt.Sprintf("race-%d", i)
		for _, s := range []*Server{a, b} {
			for range perServer {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := c.lookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: subject})
					if err != nil {
						t.Errorf("lookup %s: %v", subject, err)
						return
					}
					var gs []string
					for _, g := range resp.Groups {
						gs = append(gs, g.Group)
					}
					answers <- answer{subject, gs}
				}()
			}
		}
	}
	wg.Wait()
	close(answers)
	seen := map[string][]string{}
	load := map[string]int{}
	for ans := range answers {
		if len(ans.groups) != 2 {
			t.Fatalf("%s got %v, want 2 groups", ans.subject, ans.groups)
		}
		if prev, ok := seen[ans.subject]; ok && !slices.Equal(prev, ans.groups) {
			t.Fatalf("%s: servers disagree: %v vs %v", ans.subject, prev, ans.groups)
		}
		if _, ok := seen[ans.subject]; !ok {
			for _, g := range ans.groups {
				load[g]++
			}
		}
		seen[ans.subject] = ans.groups
	}
	if len(seen) != subjects {
		t.Fatalf("answers for %d subjects, want %d", len(seen), subjects)
	}
	t.Logf("routes per group: %v", load)
	// Both views converge on the same routes.
	eventually(t, 5*time.Second, "both views list every route", func() bool {
		return len(a.routes("")) == subjects && len(b.routes("")) == subjects
	})
}

func TestServer_LeastLoadedGroupsFirst(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), func(o *Options) { o.MinGroups = 1 })
	c := newClient(t)
	for i := 1; i <= 3; i++ {
		c.mustRegister(s, master(fmt.Sprintf("g%d", i), fmt.Sprintf("127.0.0.1:%d", 1000+i)))
	}
	eventually(t, 5*time.Second, "three groups", func() bool { return len(s.groups()) == 3 })
	counts := map[string]int{}
	for i := range 9 {
		resp := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: fmt.Sprintf("s%d", i)})
		counts[resp.Groups[0].Group]++
	}
	for g, n := range counts {
		if n != 3 {
			t.Fatalf("routes per group %v: want 3 each (%s has %d)", counts, g, n)
		}
	}
}

func TestAdminAPI_ChangesNeedTheToken(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	c := newClient(t)
	c.mustRegister(s, master("g1", "127.0.0.1:1001"))
	c.mustRegister(s, master("g2", "127.0.0.1:1002"))
	eventually(t, 5*time.Second, "two groups", func() bool { return len(s.groups()) == 2 })
	c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
	ctx := context.Background()
	before := snapshot(t, s)

	for name, cl := range map[string]*api.Client{"no token": admin(s, ""), "wrong token": admin(s, "nope")} {
		if _, err := cl.MarkReadonly(ctx, "g1", ""); !errors.Is(err, api.ErrUnauthorized) {
			t.Errorf("%s: mark readonly: err %v, want 401", name, err)
		}
		if _, err := cl.RemoveRouteGroup(ctx, "orders", "g1"); !errors.Is(err, api.ErrUnauthorized) {
			t.Errorf("%s: remove route group: err %v, want 401", name, err)
		}
		if _, err := cl.ResetOffset(ctx, "orders", "billing", "earliest"); !errors.Is(err, api.ErrUnauthorized) {
			t.Errorf("%s: reset: err %v, want 401", name, err)
		}
		if _, err := cl.PurgeDeadLetters(ctx, "orders", "billing", nil); !errors.Is(err, api.ErrUnauthorized) {
			t.Errorf("%s: purge: err %v, want 401", name, err)
		}
		// Reads need no token, but a wrong one is refused everywhere.
		if _, err := cl.Groups(ctx); name == "no token" && err != nil || name == "wrong token" && !errors.Is(err, api.ErrUnauthorized) {
			t.Errorf("%s: read groups: %v", name, err)
		}
	}
	// Nothing changed in etcd.
	if after := snapshot(t, s); after != before {
		t.Fatalf("etcd changed after refused changes:\nbefore %s\nafter  %s", before, after)
	}
	for _, g := range s.groups() {
		if g.State != "rw" {
			t.Fatalf("group %s is %s after refused changes", g.Name, g.State)
		}
	}
	if r := s.routes("orders"); len(r) != 1 || len(r[0].Groups) != 2 {
		t.Fatalf("route changed after refused changes: %+v", r)
	}
}

func TestAdminAPI_ReadonlyAndRouteChanges(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	c := newClient(t)
	for i := 1; i <= 3; i++ {
		c.mustRegister(s, master(fmt.Sprintf("g%d", i), fmt.Sprintf("127.0.0.1:%d", 1000+i)))
	}
	eventually(t, 5*time.Second, "three groups", func() bool { return len(s.groups()) == 3 })
	ctx := context.Background()
	cl := admin(s, testToken)
	route := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
	g0 := route.Groups[0].Group

	// Readonly for one subject, then for all.
	if _, err := cl.MarkReadonly(ctx, g0, "orders"); err != nil {
		t.Fatal(err)
	}
	if st := groupState(c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"}), g0); st != protocol.GroupReadonly {
		t.Fatalf("after marking %s readonly for orders its state is %v", g0, st)
	}
	g, err := cl.MarkReadonly(ctx, g0, "")
	if err != nil {
		t.Fatal(err)
	}
	if g.State != "readonly" || !slices.Equal(g.Readonly, []string{"*", "orders"}) {
		t.Fatalf("group after marks: %+v", g)
	}
	if _, err := cl.UnmarkReadonly(ctx, g0, ""); err != nil {
		t.Fatal(err)
	}
	if g, err = cl.UnmarkReadonly(ctx, g0, "orders"); err != nil || g.State != "rw" {
		t.Fatalf("after unmarking: %+v, %v", g, err)
	}
	// A readonly group gets no new routes.
	if _, err := cl.MarkReadonly(ctx, "g1", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.MarkReadonly(ctx, "g2", ""); err != nil {
		t.Fatal(err)
	}
	fresh := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "fresh"})
	if len(fresh.Groups) != 1 || fresh.Groups[0].Group != "g3" {
		t.Fatalf("route of a new subject with g1, g2 readonly: %+v", fresh.Groups)
	}

	// Add and remove groups; the last one stays.
	var missing string
	for _, n := range []string{"g1", "g2", "g3"} {
		if groupState(route, n) == 0 {
			missing = n
		}
	}
	r, err := cl.AddRouteGroup(ctx, "orders", missing)
	if err != nil || len(r.Groups) != 3 {
		t.Fatalf("add %s: %+v, %v", missing, r, err)
	}
	if got := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"}); len(got.Groups) != 3 {
		t.Fatalf("lookup after adding a group: %+v", got.Groups)
	}
	if _, err := cl.AddRouteGroup(ctx, "orders", "nosuch"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("add an unknown group: err %v, want 404", err)
	}
	if _, err := cl.RemoveRouteGroup(ctx, "fresh", "g3"); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("remove the last group: err %v, want 409", err)
	}
	if _, err := cl.RemoveRouteGroup(ctx, "orders", "nosuch"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("remove a group not on the route: err %v, want 404", err)
	}
	if r, err = cl.RemoveRouteGroup(ctx, "orders", missing); err != nil || len(r.Groups) != 2 {
		t.Fatalf("remove %s: %+v, %v", missing, r, err)
	}
	if _, err := cl.MarkReadonly(ctx, "bad/name", ""); err == nil {
		t.Fatal("readonly for a bad group name accepted")
	}
}

func groupState(r protocol.LookupResponse, group string) protocol.GroupState {
	for _, g := range r.Groups {
		if g.Group == group {
			return g.State
		}
	}
	return 0
}

func TestServer_ConsumerRegistrationAndOffline(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), func(o *Options) { o.ClientTTL = 2 * time.Second })
	c := newClient(t)
	b := startFakeBroker(t, "g1")
	c.mustRegister(s, master("g1", b.addr()))
	eventually(t, 5*time.Second, "g1", func() bool { return len(s.groups()) == 1 })
	hb := protocol.ClientHeartbeatRequest{ClientType: protocol.ClientConsumer, Subject: "orders", Group: "billing", ClientID: "c1"}
	resp, err := c.heartbeat(s, hb)
	if err != nil || resp.LeaseID == 0 {
		t.Fatalf("heartbeat: %+v, %v", resp, err)
	}
	ctx := context.Background()
	cl := admin(s, testToken)
	eventually(t, 5*time.Second, "consumer listed", func() bool {
		gs, err := cl.Consumers(ctx, "orders")
		return err == nil && len(gs) == 1 && len(gs[0].Consumers) == 1 && gs[0].Consumers[0].Online
	})
	c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientConsumer, Subject: "orders", Group: "billing", ClientID: "c1"})
	res, err := cl.SetConsumerOnline(ctx, "orders", "billing", "c1", false)
	if err != nil || !slices.Equal(res.OK, []string{"g1"}) {
		t.Fatalf("offline: %+v, %v", res, err)
	}
	if l := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientConsumer, Subject: "orders", Group: "billing", ClientID: "c1"}); l.Flags&protocol.LookupConsumerOffline == 0 {
		t.Fatal("lookup does not say the consumer is offline")
	}
	hb.LeaseID = resp.LeaseID
	if r2, err := c.heartbeat(s, hb); err != nil || r2.Flags&protocol.LookupConsumerOffline == 0 || r2.LeaseID != resp.LeaseID {
		t.Fatalf("heartbeat after offline: %+v, %v", r2, err)
	}
	if got := b.manageRequests(); len(got) != 1 || got[0].Action != protocol.ManageConsumerOffline || got[0].Consumer != "c1" {
		t.Fatalf("broker got %+v", got)
	}
	if _, err := cl.SetConsumerOnline(ctx, "orders", "billing", "c1", true); err != nil {
		t.Fatal(err)
	}
	if l := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientConsumer, Subject: "orders", Group: "billing", ClientID: "c1"}); l.Flags != 0 {
		t.Fatal("lookup still says offline")
	}
	// The consumer stops heartbeating: its registration expires.
	eventually(t, 6*time.Second, "consumer registration to expire", func() bool {
		s.view.mu.RLock()
		defer s.view.mu.RUnlock()
		return len(s.view.consumers) == 0
	})
}

func TestAdminAPI_RelaysToBrokers(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	c := newClient(t)
	b1, b2 := ordersOnTwoGroups(t, s, c)
	for i, b := range []*fakeBroker{b1, b2} {
		b.stats = protocol.BrokerStatsResponse{Subjects: []protocol.SubjectStats{{Subject: "orders", Messages: 100, Groups: []protocol.GroupStats{
			{Group: "billing", Cursor: 90, Backlog: uint64(10 * (i + 1))}}}}}
	}
	b1.stats.Subjects = append(b1.stats.Subjects,
		protocol.SubjectStats{Subject: protocol.RetrySubject("orders", "billing"), Messages: 7, Groups: []protocol.GroupStats{{Group: "billing", Backlog: 7}}},
		protocol.SubjectStats{Subject: protocol.DeadSubject("orders", "billing"), Messages: 3})
	b1.addDeadLetter(t, 1, "orders", "m-1", "hello")
	b1.addDeadLetter(t, 2, "orders", "m-2", "world")
	b2.addDeadLetter(t, 1, "orders", "m-3", string([]byte{0xff, 0xfe}))
	ctx := context.Background()
	cl := admin(s, testToken)

	gs, err := cl.Consumers(ctx, "orders")
	if err != nil || len(gs) != 1 || gs[0].Backlog != 30 || gs[0].RetryBacklog != 7 || len(gs[0].PerBroker) != 2 {
		t.Fatalf("consumer groups: %+v, %v", gs, err)
	}
	if all, err := cl.Consumers(ctx, ""); err != nil || len(all) != 1 {
		t.Fatalf("every consumer group: %+v, %v (retry and dead subjects must fold into orders/billing)", all, err)
	}
	for _, to := range []string{"earliest", "latest", "2026-01-02T03:04:05Z"} {
		res, err := cl.ResetOffset(ctx, "orders", "billing", to)
		if err != nil || len(res.OK) != 2 {
			t.Fatalf("reset to %s: %+v, %v", to, res, err)
		}
	}
	want := []protocol.ManageAction{protocol.ManageResetEarliest, protocol.ManageResetLatest, protocol.ManageResetTime}
	for _, b := range []*fakeBroker{b1, b2} {
		got := b.manageRequests()
		if len(got) != 3 {
			t.Fatalf("broker %s got %+v", b.group, got)
		}
		for i, r := range got {
			if r.Action != want[i] || r.Subject != "orders" || r.Group != "billing" {
				t.Fatalf("broker %s request %d: %+v", b.group, i, r)
			}
		}
		if !got[2].Time.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
			t.Fatalf("reset time %v", got[2].Time)
		}
	}
	if _, err := cl.ResetOffset(ctx, "orders", "billing", "yesterday"); !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("reset to a bad time: err %v, want 400", err)
	}
	if _, err := cl.ResetOffset(ctx, "nosuch", "billing", "latest"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("reset an unrouted subject: err %v, want 404", err)
	}

	dl, err := cl.DeadLetters(ctx, "orders", "billing", 0, 10)
	if err != nil || dl.Total != 3 || len(dl.Letters) != 3 {
		t.Fatalf("dead letters: %+v, %v", dl, err)
	}
	var binary api.DeadLetter
	for _, l := range dl.Letters {
		if l.ID == "m-3" {
			binary = l
		}
	}
	if !binary.BodyBase64 || binary.Body != "//4=" {
		t.Fatalf("binary body: %+v", binary)
	}
	one, err := cl.InspectDeadLetter(ctx, "orders", "billing", "m-2")
	if err != nil || len(one.Letters) != 1 || one.Letters[0].Body != "world" || one.Letters[0].Attempts != 16 {
		t.Fatalf("inspect: %+v, %v", one, err)
	}
	if _, err := cl.InspectDeadLetter(ctx, "orders", "billing", "nope"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("inspect a missing id: err %v, want 404", err)
	}
	red, err := cl.RedriveDeadLetters(ctx, "orders", "billing", []string{"m-1"})
	if err != nil || red.Affected != 1 || red.Total != 2 {
		t.Fatalf("redrive: %+v, %v", red, err)
	}
	pur, err := cl.PurgeDeadLetters(ctx, "orders", "billing", nil)
	if err != nil || pur.Affected != 2 || pur.Total != 0 {
		t.Fatalf("purge: %+v, %v", pur, err)
	}

	// A dead master: the relay reports it, and fails only if all fail.
	_ = b2.srv.Close(ctx)
	res, err := cl.ResetOffset(ctx, "orders", "billing", "latest")
	if err != nil || len(res.OK) != 1 || len(res.Errors) != 1 || res.Errors[0].BrokerGroup != b2.group {
		t.Fatalf("reset with one master down: %+v, %v", res, err)
	}
	_ = b1.srv.Close(ctx)
	if _, err := cl.ResetOffset(ctx, "orders", "billing", "latest"); err == nil || !errors.Is(err, &api.HTTPError{Status: 502}) {
		t.Fatalf("reset with every master down: err %v, want 502", err)
	}
}

func TestServer_HealthReadyMetricsConsole(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	c := newClient(t)
	c.mustRegister(s, master("g1", "127.0.0.1:1001"))
	eventually(t, 5*time.Second, "g1", func() bool { return len(s.groups()) == 1 })
	c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
	base := "http://" + s.HTTPAddr().String()
	for path, want := range map[string]string{
		"/healthz":    "ok",
		"/readyz":     "ok",
		"/metrics":    `qmq_meta_lookups_total{client_type="producer"} 1`,
		"/":           "<!doctype html>",
		"/api/v1/nix": "no API endpoint",
	} {
		body := httpGet(t, base+path)
		if !containsStr(body, want) {
			t.Errorf("GET %s: %q does not contain %q", path, truncate(body, 300), want)
		}
	}
	st, err := admin(s, "").Status(context.Background())
	if err != nil || len(st.MetaServers) != 1 || st.MetaServers[0].TCP != s.Addr().String() || st.Groups.ReadWrite != 1 || st.Subjects != 1 {
		t.Fatalf("status: %+v, %v", st, err)
	}
}

func TestAdminAPI_BadInput(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	c := newClient(t)
	c.mustRegister(s, master("g1", "127.0.0.1:1001"))
	eventually(t, 5*time.Second, "g1", func() bool { return len(s.groups()) == 1 })
	base := "http://" + s.HTTPAddr().String() + "/api/v1"
	cases := []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/routes/orders/groups", `{"group":`, 400},
		{"POST", "/routes/orders/groups", `{"group":"g1","extra":1}`, 400},
		{"POST", "/routes/bad%20subject/groups", `{"group":"g1"}`, 400},
		{"POST", "/consumers/orders/billing/reset", `{"to":"tomorrow"}`, 400},
		{"POST", "/consumers/orders/bad%20group/reset", `{"to":"latest"}`, 400},
		{"POST", "/consumers/orders/billing/bad%2Fid/offline", ``, 400},
		{"GET", "/deadletters/orders/billing?after=abc", ``, 400},
		{"POST", "/groups/nosuch/readonly", `{}`, 404},
		{"GET", "/routes/nosuch", ``, 404},
		{"GET", "/nosuch", ``, 404},
		{"GET", "/routes/orders/groups", ``, 404}, // no GET there: the JSON catch-all answers
	}
	for _, tc := range cases {
		req, err := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e api.Error
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s %s: HTTP %d (%s), want %d", tc.method, tc.path, tc.body, resp.StatusCode, e.Error, tc.want)
		}
	}
}

// TestServer_TCPConnectionBounds: the meta server's TCP port takes the
// bounds of its options: an idle connection is closed after IdleTimeout,
// and past MaxConns a new connection is closed at once; the server keeps
// answering the connections it holds.
func TestServer_TCPConnectionBounds(t *testing.T) {
	eps := startEtcd(t)
	s := startServer(t, eps, func(o *Options) { o.Limits.IdleTimeout = 500 * time.Millisecond })
	addr := s.Addr().String()
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	start := time.Now()
	_ = idle.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Fatal("an idle connection got bytes, want it closed")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("an idle connection was not closed within 15 s (IdleTimeout 500ms)")
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("closed after %v, before IdleTimeout", d)
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	eventually(t, 10*time.Second, "the idle connection released", func() bool { return s.tcp.Stats().Conns == 0 })
	if st := s.tcp.Stats(); st.ClosedIdle != 1 {
		t.Fatalf("ClosedIdle %d, want 1", st.ClosedIdle)
	}

	s = startServer(t, eps, func(o *Options) { o.Limits.MaxConns = 2 })
	addr = s.Addr().String()
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	eventually(t, 10*time.Second, "two connections open", func() bool { return s.tcp.Stats().Conns == 2 })
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	_ = extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection past MaxConns got bytes, want it closed")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a connection past MaxConns stayed open")
	}
}

package metaclient

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"

	"github.com/qmq-go/qmq/pkg/testutil"
)

// fakeMeta is a meta server on netserver that answers lookups with a route
// the test sets, and registrations and heartbeats with fixed leases.
type fakeMeta struct {
	srv     *netserver.Server
	lookups atomic.Int64

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced by set (long polls wait on it)
	version   uint64
	groups    []protocol.RouteGroup
	offline   bool
	registers []protocol.RegisterRequest
	beats     []protocol.ClientHeartbeatRequest
	ttl       time.Duration
}

func startFakeMeta(t *testing.T) *fakeMeta { return startFakeMetaAt(t, "") }

// startFakeMetaAt starts the fake meta server on addr ("": a free port).
func startFakeMetaAt(t *testing.T, addr string) *fakeMeta {
	t.Helper()
	m := &fakeMeta{version: 1, ttl: 600 * time.Millisecond, changed: make(chan struct{}),
		groups: []protocol.RouteGroup{{Group: "g1", Kind: protocol.KindRealtime, State: protocol.GroupReadWrite, Master: "127.0.0.1:1"}}}
	mux := netserver.NewMux()
	mux.HandleFunc(protocol.CmdLookup, func(r *netserver.Request) {
		q, err := protocol.DecodeLookupRequest(r.Body)
		if err != nil {
			r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
			return
		}
		m.lookups.Add(1)
		deadline := time.After(q.Wait)
		for {
			m.mu.Lock()
			resp := protocol.LookupResponse{Version: m.version, Timestamp: time.Now(), Groups: m.groups}
			if m.offline {
				resp.Flags = protocol.LookupConsumerOffline
			}
			changed := m.changed
			m.mu.Unlock()
			if q.Wait == 0 || protocol.RouteHash(&resp) != q.Known {
				r.Reply(protocol.StatusOK, protocol.AppendLookupResponse(nil, &resp))
				return
			}
			select { // a long poll, as the meta server holds it
			case <-changed:
			case <-deadline:
				q.Wait = 0
			case <-r.Done():
				return
			}
		}
	})
	mux.HandleFunc(protocol.CmdRegister, func(r *netserver.Request) {
		req, err := protocol.DecodeRegisterRequest(r.Body)
		if err != nil {
			r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
			return
		}
		if req.Group == "taken" {
			r.ReplyError(protocol.Errorf(protocol.StatusInvalid, "group taken already has a live master"))
			return
		}
		m.mu.Lock()
		m.registers = append(m.registers, req)
		ttl := m.ttl
		m.mu.Unlock()
		r.Reply(protocol.StatusOK, protocol.AppendRegisterResponse(nil, &protocol.RegisterResponse{LeaseID: 42, TTL: ttl, Version: 1}))
	})
	mux.HandleFunc(protocol.CmdClientHeartbeat, func(r *netserver.Request) {
		req, err := protocol.DecodeClientHeartbeatRequest(r.Body)
		if err != nil {
			r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
			return
		}
		m.mu.Lock()
		m.beats = append(m.beats, req)
		resp := protocol.ClientHeartbeatResponse{LeaseID: 7, TTL: m.ttl}
		if m.offline {
			resp.Flags = protocol.LookupConsumerOffline
		}
		m.mu.Unlock()
		r.Reply(protocol.StatusOK, protocol.AppendClientHeartbeatResponse(nil, &resp))
	})
	srv, err := netserver.New(netserver.Options{Addr: addr}, mux, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	m.srv = srv
	return m
}

func (m *fakeMeta) addr() string { return m.srv.Addr().String() }

func (m *fakeMeta) set(version uint64, groups ...protocol.RouteGroup) {
	m.mu.Lock()
	m.version, m.groups = version, groups
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

// A route is watched with a long-polling lookup: a change on the meta
// server reaches the cache at once, without a refresh, and without asking
// again while nothing changes.
func TestClient_WatchFollowsChanges(t *testing.T) {
	m := startFakeMeta(t)
	m.set(1, rg("g1", protocol.GroupReadWrite))
	c := newTestClient(t, []string{m.addr()}, WithRefreshInterval(time.Hour), WithWatch(5*time.Second))
	ctx := context.Background()
	if r, err := c.Lookup(ctx, protocol.ClientProducer, "orders", ""); err != nil || r.Groups[0].Group != "g1" {
		t.Fatalf("lookup: %+v, %v", r, err)
	}
	eventually(t, 2*time.Second, "the long poll", func() bool { return m.lookups.Load() == 2 })
	changed := time.Now()
	m.set(2, rg("g2", protocol.GroupReadWrite))
	eventually(t, time.Second, "the change in the cache", func() bool {
		r, _ := c.Lookup(ctx, protocol.ClientProducer, "orders", "")
		return r.Groups[0].Group == "g2"
	})
	t.Logf("a change reached the cache %v after it was made", time.Since(changed).Round(time.Millisecond))
	time.Sleep(300 * time.Millisecond)
	if n := m.lookups.Load(); n != 3 {
		t.Fatalf("%d lookups, want 3: the first, the long poll answered with the change, the next long poll", n)
	}
}

func rg(name string, st protocol.GroupState) protocol.RouteGroup {
	return protocol.RouteGroup{Group: name, Kind: protocol.KindRealtime, State: st, Master: "127.0.0.1:9"}
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, timeout, what, cond)
}

func newTestClient(t *testing.T, addrs []string, opts ...Option) *Client {
	t.Helper()
	// Watching off unless a test turns it on: these tests count lookups.
	c, err := New(addrs, "test-client", append([]Option{WithRequestTimeout(time.Second), WithWatch(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestClient_CachesAndKeepsServingWhileMetaIsDown(t *testing.T) {
	m := startFakeMeta(t)
	c := newTestClient(t, []string{m.addr()}, WithRefreshInterval(50*time.Millisecond))
	ctx := context.Background()
	r, err := c.Lookup(ctx, protocol.ClientProducer, "orders", "")
	if err != nil || len(r.Groups) != 1 || r.Groups[0].Group != "g1" {
		t.Fatalf("first lookup: %+v, %v", r, err)
	}
	n := m.lookups.Load()
	for range 100 {
		if _, err := c.Lookup(ctx, protocol.ClientProducer, "orders", ""); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.lookups.Load(); got > n+2 {
		t.Fatalf("100 cached lookups cost %d meta requests", got-n)
	}
	// The refresh loop picks up a change.
	m.set(2, rg("g1", protocol.GroupReadonly), rg("g2", protocol.GroupReadWrite))
	eventually(t, 2*time.Second, "the refresh loop to bring the new route", func() bool {
		r, _ := c.Lookup(ctx, protocol.ClientProducer, "orders", "")
		return len(r.Groups) == 2
	})
	r, _ = c.Lookup(ctx, protocol.ClientProducer, "orders", "")
	if w := r.Writable(); len(w) != 1 || w[0].Group != "g2" {
		t.Fatalf("writable %+v, want g2", w)
	}
	if rd := r.Readable(); len(rd) != 2 {
		t.Fatalf("readable %+v, want both", rd)
	}
	// The meta server goes away: cached routes keep working, unknown ones fail.
	_ = m.srv.Close(ctx)
	time.Sleep(200 * time.Millisecond) // several failed refreshes
	c.Refresh(protocol.ClientProducer, "orders", "")
	for range 10 {
		r, err := c.Lookup(ctx, protocol.ClientProducer, "orders", "")
		if err != nil || len(r.Groups) != 2 {
			t.Fatalf("lookup while the meta server is down: %+v, %v", r, err)
		}
	}
	if _, err := c.Lookup(ctx, protocol.ClientProducer, "unknown", ""); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("uncached lookup while down: err %v, want ErrNoRoute", err)
	}
}

func TestClient_FailsOverAndIgnoresStaleAnswers(t *testing.T) {
	a, b := startFakeMeta(t), startFakeMeta(t)
	a.set(10, rg("new", protocol.GroupReadWrite))
	b.set(5, rg("old", protocol.GroupReadWrite))
	c := newTestClient(t, []string{a.addr(), b.addr()}, WithRefreshInterval(time.Hour), WithMinEarlyRefresh(0))
	ctx := context.Background()
	r, err := c.Lookup(ctx, protocol.ClientProducer, "orders", "")
	if err != nil || r.Groups[0].Group != "new" || r.Version != 10 {
		t.Fatalf("lookup: %+v, %v", r, err)
	}
	// a dies; the early refresh fails over to b, whose answer is older and
	// must not replace the cached one.
	_ = a.srv.Close(ctx)
	c.Refresh(protocol.ClientProducer, "orders", "")
	eventually(t, 3*time.Second, "b to be asked", func() bool { return b.lookups.Load() == 1 })
	time.Sleep(50 * time.Millisecond)
	if r, _ := c.Lookup(ctx, protocol.ClientProducer, "orders", ""); r.Groups[0].Group != "new" {
		t.Fatalf("a stale answer replaced the cache: %+v", r)
	}
	b.set(11, rg("newer", protocol.GroupReadWrite))
	eventually(t, 3*time.Second, "the newer answer from b", func() bool {
		c.Refresh(protocol.ClientProducer, "orders", "")
		r, _ := c.Lookup(ctx, protocol.ClientProducer, "orders", "")
		return r.Groups[0].Group == "newer"
	})
	// New keys go straight to b now (preferred), not through dead a first.
	c.mu.Lock()
	preferred := c.preferred
	c.mu.Unlock()
	if preferred != 1 {
		t.Fatalf("preferred meta server %d, want 1 (b)", preferred)
	}
	if _, err := c.Lookup(ctx, protocol.ClientConsumer, "orders", "billing"); err != nil {
		t.Fatal(err)
	}
}

func TestClient_RefreshIsRateLimited(t *testing.T) {
	m := startFakeMeta(t)
	c := newTestClient(t, []string{m.addr()}, WithRefreshInterval(time.Hour), WithMinEarlyRefresh(time.Hour))
	ctx := context.Background()
	if _, err := c.Lookup(ctx, protocol.ClientProducer, "orders", ""); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		c.Refresh(protocol.ClientProducer, "orders", "")
	}
	eventually(t, 2*time.Second, "one early refresh", func() bool { return m.lookups.Load() == 2 })
	time.Sleep(100 * time.Millisecond)
	if n := m.lookups.Load(); n != 2 {
		t.Fatalf("50 Refresh calls cost %d lookups, want 1", n-1)
	}
}

func TestNewStatic(t *testing.T) {
	c := NewStatic([]protocol.RouteGroup{rg("g1", protocol.GroupReadWrite)})
	defer c.Close()
	r, err := c.Lookup(context.Background(), protocol.ClientProducer, "anything", "")
	if err != nil || len(r.Writable()) != 1 {
		t.Fatalf("%+v, %v", r, err)
	}
	reg := c.RegisterConsumer("s", "g", "c")
	reg.Close()
}

func TestConsumerRegistration(t *testing.T) {
	m := startFakeMeta(t)
	c := newTestClient(t, []string{m.addr()})
	reg := c.RegisterConsumer("orders", "billing", "c1")
	if !reg.Registered() || reg.Offline() {
		t.Fatalf("registered %v offline %v", reg.Registered(), reg.Offline())
	}
	if again := c.RegisterConsumer("orders", "billing", "c1"); again != reg {
		t.Fatal("a second registration of the same key made a new one")
	}
	m.mu.Lock()
	m.offline = true
	m.mu.Unlock()
	eventually(t, 2*time.Second, "the offline flag (heartbeats every 200ms)", reg.Offline)
	m.mu.Lock()
	if len(m.beats) < 2 || m.beats[len(m.beats)-1].LeaseID != 7 {
		t.Fatalf("heartbeats %+v: want the lease sent back", m.beats)
	}
	m.mu.Unlock()
	reg.Close()
	m.mu.Lock()
	last := m.beats[len(m.beats)-1]
	m.mu.Unlock()
	if last.Flags&protocol.ClientLeaving == 0 {
		t.Fatalf("Close sent %+v, want a leaving heartbeat", last)
	}
}

func TestRegister_HeartbeatsWithLeaseAndLeaves(t *testing.T) {
	dead := startFakeMeta(t)
	deadAddr := dead.addr()
	_ = dead.srv.Close(context.Background())
	m := startFakeMeta(t)
	var state atomic.Uint32
	state.Store(uint32(protocol.GroupReadWrite))
	b := Broker{Kind: protocol.KindRealtime, Role: protocol.RoleMaster, Group: "g1", Address: "127.0.0.1:5000",
		Report: func() (protocol.GroupState, protocol.BrokerLoad) {
			return protocol.GroupState(state.Load()), protocol.BrokerLoad{InPerSec: 5}
		}}
	r, err := Register(context.Background(), []string{deadAddr, m.addr()}, b, WithRequestTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if r.LeaseID() != 42 || r.TTL() != 600*time.Millisecond || !r.Healthy() {
		t.Fatalf("lease %d ttl %v healthy %v", r.LeaseID(), r.TTL(), r.Healthy())
	}
	state.Store(uint32(protocol.GroupReadonly))
	eventually(t, 3*time.Second, "heartbeats carrying the lease and the new state", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		last := m.registers[len(m.registers)-1]
		return len(m.registers) >= 3 && last.LeaseID == 42 && last.State == protocol.GroupReadonly && last.BrokerID == "127.0.0.1:5000"
	})
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	last := m.registers[len(m.registers)-1]
	m.mu.Unlock()
	if last.Flags&protocol.RegisterLeaving == 0 {
		t.Fatalf("Close sent %+v, want leaving", last)
	}
	taken := b
	taken.Group = "taken"
	if _, err := Register(context.Background(), []string{m.addr()}, taken); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("register into a taken group: err %v, want ErrInvalid", err)
	}
}

func TestClient_IsARouteResolver(t *testing.T) {
	m := startFakeMeta(t)
	withEpoch := rg("a", protocol.GroupReadWrite)
	withEpoch.Epoch = 41
	m.set(3, withEpoch, rg("b", protocol.GroupReadonly), protocol.RouteGroup{Group: "c", State: protocol.GroupUnavailable})
	c := newTestClient(t, []string{m.addr()}, WithRefreshInterval(time.Hour), WithMinEarlyRefresh(0))
	ctx := context.Background()
	gs, err := c.Resolve(ctx, route.Request{Kind: route.Produce, Subject: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	want := []route.Group{{Name: "a", Addr: "127.0.0.1:9", State: route.ReadWrite, Epoch: 41}, {Name: "b", Addr: "127.0.0.1:9", State: route.Readonly}, {Name: "c", State: route.Unavailable}}
	if len(gs) != 3 || gs[0] != want[0] || gs[1] != want[1] || gs[2] != want[2] {
		t.Fatalf("resolved %+v, want %+v", gs, want)
	}
	if _, err := c.Resolve(ctx, route.Request{Kind: route.Consume, Subject: "orders", Group: "billing", ClientID: "c9"}); err != nil {
		t.Fatal(err)
	}
	m.set(4)
	c.Invalidate(route.Request{Kind: route.Produce, Subject: "orders"})
	eventually(t, 2*time.Second, "an empty route after invalidation", func() bool {
		_, err := c.Resolve(ctx, route.Request{Kind: route.Produce, Subject: "orders"})
		return errors.Is(err, route.ErrNoGroups)
	})
	if _, err := c.Resolve(ctx, route.Request{Kind: 99, Subject: "orders"}); err == nil {
		t.Fatal("unknown kind accepted")
	}
}

func TestClient_AcceptsLowerVersionsAfterTheStaleWindow(t *testing.T) {
	m := startFakeMeta(t)
	m.set(1000, rg("old-etcd", protocol.GroupReadWrite))
	c := newTestClient(t, []string{m.addr()}, WithRefreshInterval(100*time.Millisecond))
	ctx := context.Background()
	if _, err := c.Lookup(ctx, protocol.ClientProducer, "orders", ""); err != nil {
		t.Fatal(err)
	}
	// etcd was rebuilt: revisions start again near 1.
	// (That it is ignored at first is TestClient_FailsOverAndIgnoresStaleAnswers.)
	m.set(3, rg("new-etcd", protocol.GroupReadWrite))
	eventually(t, 3*time.Second, "the lower-versioned answer after the stale window (300ms)", func() bool {
		r, _ := c.Lookup(ctx, protocol.ClientProducer, "orders", "")
		return r.Groups[0].Group == "new-etcd"
	})
}

func TestRegister_HeartbeatInterval(t *testing.T) {
	m := startFakeMeta(t) // grants a 600 ms TTL
	b := Broker{Kind: protocol.KindRealtime, Role: protocol.RoleMaster, Group: "g1", Address: "127.0.0.1:5000"}
	fast, err := Register(context.Background(), []string{m.addr()}, b, WithHeartbeatInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close(context.Background())
	if got := fast.interval(); got != 50*time.Millisecond {
		t.Fatalf("interval %v, want 50ms", got)
	}
	eventually(t, 2*time.Second, "heartbeats every 50ms", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.registers) >= 6
	})
	b.Group = "g2"
	slow, err := Register(context.Background(), []string{m.addr()}, b, WithHeartbeatInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close(context.Background())
	if got := slow.interval(); got != 300*time.Millisecond {
		t.Fatalf("interval %v, want half the 600ms TTL", got)
	}
}

package metaserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/metaserver/ctl"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// replicatedGroup is a group of two fake brokers registered through the
// test's client: a master and a slave copying it.
type replicatedGroup struct {
	t              *testing.T
	s              *Server
	c              *client
	name           string
	master, slave  *fakeBroker
	mReq, sReq     protocol.RegisterRequest
	mEpoch         uint64
	mLease, sLease int64
}

func startReplicatedGroup(t *testing.T, s *Server, c *client, name string) *replicatedGroup {
	t.Helper()
	g := &replicatedGroup{t: t, s: s, c: c, name: name, master: startFakeBroker(t, name), slave: startFakeBroker(t, name)}
	g.mReq = master(name, g.master.addr())
	g.mReq.Load.ReplicaLagBytes, g.mReq.Load.ReplicaLagMillis = 4096, 20
	resp := c.mustRegister(s, g.mReq)
	g.mEpoch, g.mLease = resp.Epoch, resp.LeaseID
	if g.mEpoch == 0 {
		t.Fatalf("master of %s registered at epoch 0", name)
	}
	g.sReq = protocol.RegisterRequest{Kind: protocol.KindRealtime, Role: protocol.RoleSlave, State: protocol.GroupReadonly,
		Group: name, BrokerID: name + "-s", Address: g.slave.addr(), Epoch: g.mEpoch,
		Load: protocol.BrokerLoad{ReplicaLagBytes: 1 << 20, ReplicaLagMillis: 350}}
	sresp := c.mustRegister(s, g.sReq)
	if sresp.Master != g.master.addr() || sresp.Epoch != g.mEpoch {
		t.Fatalf("slave of %s told master %q epoch %d, want %s epoch %d", name, sresp.Master, sresp.Epoch, g.master.addr(), g.mEpoch)
	}
	g.sLease = sresp.LeaseID
	// The master records its caught-up slave as eligible (pkg/failover):
	// only that slave may take the group from it.
	c.mustEligible(s, protocol.EligibleRequest{Group: name, BrokerID: g.mReq.BrokerID, Epoch: g.mEpoch, Slave: g.sReq.BrokerID})
	eventually(t, 5*time.Second, name+" master and slave in the view", func() bool {
		x := s.group(name)
		return x.Master != "" && x.Slave != ""
	})
	return g
}

// handOver makes the fake brokers behave as the contract says: the master,
// asked to switch over at its epoch, unregisters and answers; the slave,
// heartbeating, sees no master and registers as master (a new
// registration: a new epoch); the old master then rejoins as the slave.
func (g *replicatedGroup) handOver() {
	var once sync.Once
	g.master.setSwitchover(func(q protocol.SwitchoverRequest) error {
		if q.Group != g.name {
			return protocol.Errorf(protocol.StatusInvalid, "not my group: "+q.Group)
		}
		if q.Epoch != g.mEpoch {
			return protocol.Errorf(protocol.StatusStaleEpoch, "asked at the wrong epoch")
		}
		leave := g.mReq
		leave.Flags, leave.LeaseID = protocol.RegisterLeaving, g.mLease
		if _, err := g.c.register(g.s, leave); err != nil {
			return protocol.Errorf(protocol.StatusInternal, "unregister: "+err.Error())
		}
		once.Do(func() { go g.electAndRejoin() })
		return nil
	})
}

func (g *replicatedGroup) electAndRejoin() {
	deadline := time.Now().Add(10 * time.Second)
	hb := g.sReq
	hb.LeaseID = g.sLease
	var newEpoch uint64
	for time.Now().Before(deadline) {
		resp, err := g.c.register(g.s, hb)
		if err == nil && resp.Master == "" {
			m := g.sReq
			m.Role, m.State, m.Epoch, m.LeaseID = protocol.RoleMaster, protocol.GroupReadWrite, 0, 0
			m.Load = protocol.BrokerLoad{}
			if won, err := g.c.register(g.s, m); err == nil {
				newEpoch = won.Epoch
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if newEpoch == 0 {
		return // the test fails on its own: no new master
	}
	rejoin := g.mReq
	rejoin.Role, rejoin.State, rejoin.Epoch, rejoin.LeaseID = protocol.RoleSlave, protocol.GroupReadonly, newEpoch, 0
	rejoin.Load = protocol.BrokerLoad{}
	for time.Now().Before(deadline) {
		if _, err := g.c.register(g.s, rejoin); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSwitchover_HandsTheGroupToTheSlave runs a switchover through the
// admin API against fake brokers that hand over as the contract says: the
// answer names the old and the new master, the new epoch is larger, the
// master was asked at its epoch, and the groups show the swapped seats.
func TestSwitchover_HandsTheGroupToTheSlave(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	c := newClient(t)
	g := startReplicatedGroup(t, s, c, "g1")
	g.handOver()

	before := s.group("g1")
	if before.Epoch != g.mEpoch || before.MasterID != "g1-m" || before.SlaveID != "g1-s" || before.SlaveEpoch != g.mEpoch {
		t.Fatalf("group before: %+v", before)
	}
	if before.Lag == nil || before.Lag.Bytes != 1<<20 || before.Lag.Millis != 350 {
		t.Fatalf("group lag %+v, want the larger reports: 1MiB, 350ms", before.Lag)
	}

	scrape := metricsText(t, s)
	for _, want := range []string{`qmq_meta_replica_lag_bytes{group="g1",role="slave"} 1.048576e+06`,
		`qmq_meta_replica_lag_seconds{group="g1",role="slave"} 0.35`, `qmq_meta_replica_lag_bytes{group="g1",role="master"} 4096`,
		`qmq_meta_broker_epoch{group="g1",role="master"} ` + jsonNumber(g.mEpoch)} {
		if !strings.Contains(scrape, want) {
			t.Fatalf("/metrics lacks %s:\n%s", want, grepLines(scrape, "g1"))
		}
	}

	res, err := admin(s, testToken).Switchover(context.Background(), "g1", 6*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.From != (api.Seat{BrokerID: "g1-m", Address: g.master.addr(), Epoch: g.mEpoch}) {
		t.Fatalf("from %+v", res.From)
	}
	if res.To.BrokerID != "g1-s" || res.To.Address != g.slave.addr() || res.To.Epoch <= g.mEpoch {
		t.Fatalf("to %+v, want g1-s at an epoch above %d", res.To, g.mEpoch)
	}
	qs := g.master.switchoverRequests()
	if len(qs) != 1 || qs[0].Epoch != g.mEpoch || qs[0].Group != "g1" || qs[0].Timeout != 4*time.Second {
		t.Fatalf("the master was asked %+v, want one request at epoch %d with a 4s handover", qs, g.mEpoch)
	}
	if n := len(g.slave.switchoverRequests()); n != 0 {
		t.Fatalf("the slave was asked %d times", n)
	}
	eventually(t, 10*time.Second, "the old master back as the slave", func() bool {
		x := s.group("g1")
		return x.MasterID == "g1-s" && x.SlaveID == "g1-m" && x.SlaveEpoch == res.To.Epoch
	})
	after := s.group("g1")
	if after.Epoch != res.To.Epoch || after.State != "rw" {
		t.Fatalf("group after: %+v", after)
	}
	brokers := s.brokers()
	for _, b := range brokers {
		if b.Master != g.slave.addr() || b.Epoch != res.To.Epoch {
			t.Fatalf("broker %+v: want master %s and epoch %d", b, g.slave.addr(), res.To.Epoch)
		}
	}
	scrape = metricsText(t, s)
	for _, want := range []string{`qmq_meta_switchovers_total{outcome="ok"} 1`, `qmq_meta_relayed_requests_total{command="switchover"} 1`} {
		if !strings.Contains(scrape, want) {
			t.Fatalf("/metrics lacks %s", want)
		}
	}
}

// TestSwitchover_Refusals checks each reason a switchover does not happen:
// every one is a clear error, and the group keeps its master.
func TestSwitchover_Refusals(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	c := newClient(t)
	ctx := context.Background()
	a := admin(s, testToken)
	lone := startFakeBroker(t, "lone")
	c.mustRegister(s, master("lone", lone.addr()))
	orphan := protocol.RegisterRequest{Kind: protocol.KindRealtime, Role: protocol.RoleSlave, State: protocol.GroupReadonly,
		Group: "orphan", BrokerID: "orphan-s", Address: "127.0.0.1:1"}
	c.mustRegister(s, orphan)
	startReplicatedGroup(t, s, c, "old")                  // the master does not know CmdSwitchover
	refusing := startReplicatedGroup(t, s, c, "refusing") // the master's slave is behind
	refusing.master.setSwitchover(func(protocol.SwitchoverRequest) error {
		return protocol.Errorf(protocol.StatusRetryLater, "slave did not catch up within 4s: 1048576 bytes behind")
	})
	stuck := startReplicatedGroup(t, s, c, "stuck") // answers OK and does nothing
	stuck.master.setSwitchover(func(protocol.SwitchoverRequest) error { return nil })
	leaderless := startReplicatedGroup(t, s, c, "leaderless") // steps down; its slave never takes over
	leaderless.master.setSwitchover(func(protocol.SwitchoverRequest) error {
		leave := leaderless.mReq
		leave.Flags, leave.LeaseID = protocol.RegisterLeaving, leaderless.mLease
		_, err := c.register(s, leave)
		return err
	})
	clinging := startReplicatedGroup(t, s, c, "clinging") // drops its slave, steps down and wins the election again
	clinging.master.setSwitchover(func(protocol.SwitchoverRequest) error {
		// Without an eligible slave its leave releases nothing: the seat
		// is its own to take again.
		if _, err := c.eligible(s, protocol.EligibleRequest{Group: "clinging", BrokerID: clinging.mReq.BrokerID, Epoch: clinging.mEpoch}); err != nil {
			return err
		}
		leave := clinging.mReq
		leave.Flags, leave.LeaseID = protocol.RegisterLeaving, clinging.mLease
		if _, err := c.register(s, leave); err != nil {
			return err
		}
		_, err := c.register(s, clinging.mReq)
		return err
	})
	gone := master("gone", "127.0.0.1:1") // nothing listens there
	gone.BrokerID = "gone-m"
	c.mustRegister(s, gone)
	c.mustRegister(s, protocol.RegisterRequest{Kind: protocol.KindRealtime, Role: protocol.RoleSlave, State: protocol.GroupReadonly,
		Group: "gone", BrokerID: "gone-s", Address: "127.0.0.1:2"})
	eventually(t, 5*time.Second, "every group in the view", func() bool { return len(s.groups()) == 8 })

	cases := []struct {
		group   string
		timeout time.Duration
		status  int
		says    []string
	}{
		{"nosuch", 0, http.StatusNotFound, []string{"not registered"}},
		{"bad/name", 0, http.StatusBadRequest, []string{"must be"}},
		{"lone", 0, http.StatusConflict, []string{"no slave", "start a slave"}},
		{"orphan", 0, http.StatusConflict, []string{"no live master", "unavailable"}},
		{"old", 0, http.StatusNotImplemented, []string{"does not support switchover", "old-m", "unknown command"}},
		{"refusing", 0, http.StatusConflict, []string{"refused", "refusing-m", "keeps the group", "slave did not catch up"}},
		{"gone", 0, http.StatusBadGateway, []string{"cannot reach the master gone-m at 127.0.0.1:1"}},
		{"stuck", 3 * time.Second, http.StatusGatewayTimeout, []string{"did not complete", "stuck-m still holds the master seat"}},
		{"leaderless", 3 * time.Second, http.StatusGatewayTimeout, []string{"leaderless-m unregistered but no broker has won the election yet"}},
		{"clinging", 3 * time.Second, http.StatusGatewayTimeout, []string{"clinging-m took the master seat back at epoch"}},
	}
	t.Run("each", func(t *testing.T) { // returns once every parallel case has
		for _, tc := range cases {
			t.Run(strings.ReplaceAll(tc.group, "/", "_"), func(t *testing.T) {
				t.Parallel()
				_, err := a.Switchover(ctx, tc.group, tc.timeout)
				var he *api.HTTPError
				if !errors.As(err, &he) || he.Status != tc.status {
					t.Fatalf("switchover %s: err %v, want HTTP %d", tc.group, err, tc.status)
				}
				for _, w := range tc.says {
					if !strings.Contains(he.Message, w) {
						t.Fatalf("switchover %s: %q does not say %q", tc.group, he.Message, w)
					}
				}
			})
		}
	})
	for _, name := range []string{"lone", "old", "refusing", "stuck"} {
		if x := s.group(name); x.MasterID != name+"-m" || x.State != "rw" {
			t.Fatalf("group %s after a failed switchover: %+v", name, x)
		}
	}
	if n := len(lone.switchoverRequests()); n != 0 {
		t.Fatalf("a master without a slave was asked %d times", n)
	}

	// No token: refused before the broker is asked.
	before := len(stuck.master.switchoverRequests())
	if _, err := admin(s, "").Switchover(ctx, "stuck", 0); !errors.Is(err, api.ErrUnauthorized) {
		t.Fatalf("switchover without a token: %v", err)
	}
	if _, err := admin(s, "wrong").Switchover(ctx, "stuck", 0); !errors.Is(err, api.ErrUnauthorized) {
		t.Fatalf("switchover with a wrong token: %v", err)
	}
	if n := len(stuck.master.switchoverRequests()); n != before {
		t.Fatalf("an unauthorized switchover reached the broker")
	}
	// Timeouts out of bounds are bad input.
	for _, ms := range []int64{-1, 10, 11 * 60 * 1000} {
		err := a.Do(ctx, http.MethodPost, "/groups/stuck/switchover", api.SwitchoverRequest{TimeoutMillis: ms}, nil)
		if !errors.Is(err, api.ErrBadRequest) {
			t.Fatalf("timeoutMillis %d: %v, want 400", ms, err)
		}
	}
	scrape := metricsText(t, s)
	for _, want := range []string{`qmq_meta_switchovers_total{outcome="refused"} 3`, `qmq_meta_switchovers_total{outcome="unsupported"} 1`,
		`qmq_meta_switchovers_total{outcome="timeout"} 3`} {
		if !strings.Contains(scrape, want) {
			t.Fatalf("/metrics lacks %s:\n%s", want, grepLines(scrape, "switchovers"))
		}
	}
}

// TestSwitchover_OneAtATime: a second switchover of a group while one is
// under way is refused at once.
func TestSwitchover_OneAtATime(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	c := newClient(t)
	g := startReplicatedGroup(t, s, c, "g1")
	entered, release := make(chan struct{}), make(chan struct{})
	g.master.setSwitchover(func(protocol.SwitchoverRequest) error {
		close(entered)
		<-release
		return protocol.Errorf(protocol.StatusRetryLater, "slave did not catch up")
	})
	a := admin(s, testToken)
	first := make(chan error, 1)
	go func() {
		_, err := a.Switchover(context.Background(), "g1", 10*time.Second)
		first <- err
	}()
	<-entered
	_, err := a.Switchover(context.Background(), "g1", 10*time.Second)
	if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "already under way") {
		t.Fatalf("second switchover: %v", err)
	}
	close(release)
	if err := <-first; !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "slave did not catch up") {
		t.Fatalf("first switchover: %v", err)
	}
	if n := len(g.master.switchoverRequests()); n != 1 {
		t.Fatalf("the master was asked %d times", n)
	}
}

// TestSwitchover_CloseEndsTheWait: closing the meta server ends a
// switchover's wait at once (Close does not sit out its timeout), and the
// caller hears why.
func TestSwitchover_CloseEndsTheWait(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	c := newClient(t)
	g := startReplicatedGroup(t, s, c, "g1")
	g.master.setSwitchover(func(protocol.SwitchoverRequest) error { return nil }) // answers, never steps down
	done := make(chan error, 1)
	go func() {
		_, err := admin(s, testToken).Switchover(context.Background(), "g1", time.Minute)
		done <- err
	}()
	eventually(t, 10*time.Second, "the master asked", func() bool { return len(g.master.switchoverRequests()) == 1 })
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("close took %v with a switchover waiting", took)
	}
	select {
	case err := <-done:
		if !errors.Is(err, &api.HTTPError{Status: http.StatusServiceUnavailable}) || !strings.Contains(err.Error(), "closing") ||
			!strings.Contains(err.Error(), "still holds the master seat") {
			t.Fatalf("switchover during close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the switchover request did not end with the server")
	}
}

// TestQmqctl_SwitchoverAndReplicationColumns runs qmqctl brokers, groups and
// switchover against the fake group: roles, epochs and lag in the tables,
// the old and new master in switchover's answer, exit codes for refusals.
func TestQmqctl_SwitchoverAndReplicationColumns(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	c := newClient(t)
	g := startReplicatedGroup(t, s, c, "g1")
	lone := startFakeBroker(t, "lone")
	c.mustRegister(s, master("lone", lone.addr()))
	eventually(t, 5*time.Second, "two groups", func() bool { return len(s.groups()) == 2 })
	run := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		code := ctl.Main(append([]string{"--meta-http=" + s.HTTPAddr().String()}, args...), &out, &errOut)
		if code != want {
			t.Fatalf("qmqctl %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out.String(), errOut.String())
		}
		return out.String() + errOut.String()
	}
	has := func(out string, subs ...string) {
		t.Helper()
		for _, sub := range subs {
			if !strings.Contains(out, sub) {
				t.Fatalf("output lacks %q:\n%s", sub, out)
			}
		}
	}
	epoch := func(e uint64) string { return " " + jsonNumber(e) + " " }

	has(run(0, "status"), "replication", "1 groups with a slave, 1 without; largest lag 1.0MiB 350ms")
	out := run(0, "brokers")
	has(out, "EPOCH", "REPLICA LAG", "g1-m", "g1-s", "4.0KiB 20ms", "1.0MiB 350ms", epoch(g.mEpoch))
	out = run(0, "groups")
	has(out, "EPOCH", "REPLICA LAG", "g1-m@"+g.master.addr(), "g1-s@"+g.slave.addr(), "1.0MiB 350ms", epoch(g.mEpoch))
	var gs []api.Group
	if err := json.Unmarshal([]byte(run(0, "groups", "--json")), &gs); err != nil {
		t.Fatal(err)
	}
	for _, x := range gs {
		if x.Name == "g1" && (x.Epoch != g.mEpoch || x.Lag == nil || x.Lag.Bytes != 1<<20) {
			t.Fatalf("groups --json: %+v", x)
		}
		if x.Name == "lone" && x.Lag != nil {
			t.Fatalf("a group without a slave shows lag %+v", x.Lag)
		}
	}

	run(0, tokenFlag(t, testToken), "route", "add", "orders", "g1")
	has(run(0, "routes", "orders"), "EPOCH", g.master.addr()+"  "+jsonNumber(g.mEpoch)+"\n")

	has(run(ctl.ExitUnauthorized, "switchover", "g1"), "token")
	has(run(ctl.ExitFailed, tokenFlag(t, testToken), "switchover", "lone"), "no slave")
	has(run(ctl.ExitNotFound, tokenFlag(t, testToken), "switchover", "nosuch"), "not registered")
	has(run(ctl.ExitFailed, tokenFlag(t, testToken), "switchover", "g1", "--wait=2s"), "does not support switchover")
	run(ctl.ExitUsage, tokenFlag(t, testToken), "switchover", "g1", "--wait=10ms")
	run(ctl.ExitUsage, tokenFlag(t, testToken), "switchover")

	g.handOver()
	out = run(0, tokenFlag(t, testToken), "switchover", "g1", "--wait=6s")
	has(out, "old master", "g1-m@"+g.master.addr()+" at epoch "+jsonNumber(g.mEpoch), "new master", "g1-s@"+g.slave.addr())
	eventually(t, 10*time.Second, "the old master back as the slave", func() bool { return s.group("g1").SlaveID == "g1-m" })
	has(run(0, "groups"), "g1-s@"+g.slave.addr(), "g1-m@"+g.master.addr())
}

func jsonNumber(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// metricsText scrapes the server's /metrics.
func metricsText(t *testing.T, s *Server) string {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestConsole_ReplicationAndSwitchover loads the console's groups page in
// headless Chromium: it shows each group's epoch, seats and lag and each
// broker's role, epoch and lag; its Switch over button hands the group to
// its slave and reports the old and the new master.
func TestConsole_ReplicationAndSwitchover(t *testing.T) {
	t.Parallel()
	if chromiumPath() == "" {
		t.Skip("chromium is absent (apt-get install chromium)")
	}
	s := startServer(t, startEtcd(t), nil)
	c := newClient(t)
	g := startReplicatedGroup(t, s, c, "g1")
	lone := startFakeBroker(t, "lone")
	c.mustRegister(s, master("lone", lone.addr()))
	eventually(t, 5*time.Second, "two groups", func() bool { return len(s.groups()) == 2 })

	ch := startChromium(t)
	ch.navigate("http://" + s.HTTPAddr().String() + "/#overview")
	ch.waitText("overview", "groups with a slave (1 without; largest lag 1.0MiB 350ms)")
	if n := ch.eval("document.getElementById('n-replicated').textContent"); n != "1" {
		t.Fatalf("overview shows %s groups with a slave, want 1", n)
	}
	ch.navigate("http://" + s.HTTPAddr().String() + "/#groups")
	ch.waitText("groups", "g1-m@"+g.master.addr(), "g1-s@"+g.slave.addr(), "1.0MiB 350ms", "4.0KiB 20ms", "Brokers")
	cell := func(sel string) string {
		return ch.eval("(document.querySelector(\"" + sel + "\")||{}).textContent||''")
	}
	if got := cell("tr[data-group=g1] .epoch"); got != jsonNumber(g.mEpoch) {
		t.Fatalf("g1 epoch shows %q, want %d", got, g.mEpoch)
	}
	if got := cell("tr[data-group=lone] .lag"); got != "-" {
		t.Fatalf("a group without a slave shows lag %q", got)
	}
	if got := cell("tr[data-broker=g1-s] .role") + "/" + cell("tr[data-broker=g1-s] .epoch"); got != "slave/"+jsonNumber(g.mEpoch) {
		t.Fatalf("g1-s row shows role/epoch %q", got)
	}
	if n := ch.eval("String(document.querySelectorAll('button[data-action=switchover]').length)"); n != "1" {
		t.Fatalf("%s switchover buttons, want 1 (only g1 has a slave)", n)
	}
	ch.screenshot("groups-replication")

	g.handOver()
	ch.eval("localStorage.setItem('qmq.token', '" + testToken + "')")
	ch.eval("document.querySelector('button[data-action=switchover][data-group=g1]').click()")
	eventually(t, 15*time.Second, "the page to report the switchover", func() bool {
		return strings.Contains(ch.eval("(document.getElementById('flash-ok')||{}).textContent||''"), "→ g1-s@"+g.slave.addr())
	})
	if x := s.group("g1"); x.MasterID != "g1-s" || x.Epoch <= g.mEpoch {
		t.Fatalf("g1 after the console's switchover: %+v", x)
	}
	eventually(t, 15*time.Second, "the page to show the swapped seats", func() bool {
		return cell("tr[data-group=g1] .master") == "g1-s@"+g.slave.addr() && cell("tr[data-group=g1] .slave") == "g1-m@"+g.master.addr() &&
			cell("tr[data-group=g1] .epoch") == jsonNumber(s.group("g1").Epoch)
	})
	ch.screenshot("groups-switched")
}

package metaserver

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/metaserver/ctl"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// TestQmqctl_EveryCommand runs every qmqctl command against a meta server
// with two (fake) realtime masters, checking output, JSON and exit codes.
func TestQmqctl_EveryCommand(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), func(o *Options) { o.BrokerTTL = time.Minute }) // nothing heartbeats here
	c := newClient(t)
	b1, b2 := startFakeBroker(t, "g1"), startFakeBroker(t, "g2")
	c.mustRegister(s, master("g1", b1.addr()))
	c.mustRegister(s, master("g2", b2.addr()))
	c.mustRegister(s, master("g3", "127.0.0.1:1003"))
	eventually(t, 5*time.Second, "three groups", func() bool { return len(s.groups()) == 3 })
	route := c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
	routed := map[string]bool{}
	for _, g := range route.Groups {
		routed[g.Group] = true
	}
	var spare string
	for _, g := range []string{"g1", "g2", "g3"} {
		if !routed[g] {
			spare = g
		}
	}
	if _, err := c.heartbeat(s, protocol.ClientHeartbeatRequest{ClientType: protocol.ClientConsumer, Subject: "orders", Group: "billing", ClientID: "c1"}); err != nil {
		t.Fatal(err)
	}
	for _, b := range []*fakeBroker{b1, b2} {
		b.stats = protocol.BrokerStatsResponse{Subjects: []protocol.SubjectStats{{Subject: "orders", Messages: 50, Groups: []protocol.GroupStats{{Group: "billing", Cursor: 45, Backlog: 5}}}}}
		b.addDeadLetter(t, 1, "orders", "dl-"+b.group, "payload of "+b.group)
	}
	eventually(t, 5*time.Second, "consumer registered", func() bool {
		s.view.mu.RLock()
		defer s.view.mu.RUnlock()
		return len(s.view.consumers) == 1
	})

	tok := tokenFlag(t, testToken)
	run := qmqctlRunner(t, s.HTTPAddr().String())
	has := func(out string, subs ...string) {
		t.Helper()
		for _, sub := range subs {
			if !strings.Contains(out, sub) {
				t.Fatalf("output lacks %q:\n%s", sub, out)
			}
		}
	}

	has(run(0, "status"), "meta servers", "groups", "3 (rw 3, readonly 0, unavailable 0)", "subjects", "1")
	var st api.Status
	if err := json.Unmarshal([]byte(run(0, "status", "--json")), &st); err != nil || st.Groups.Total != 3 {
		t.Fatalf("status --json: %+v, %v", st, err)
	}
	has(run(0, "brokers"), "GROUP", "g1", "g2", "g3", "master", "realtime")
	has(run(0, "groups"), "g1", "rw")
	has(run(0, "routes"), "orders", "realtime")
	has(run(0, "routes", "orders"), "orders")
	run(ctl.ExitNotFound, "routes", "nosuch")

	// Route changes.
	run(ctl.ExitUnauthorized, "route", "add", "orders", spare)
	has(run(0, tok, "route", "add", "orders", spare), spare)
	if r := s.routes("orders"); len(r[0].Groups) != 3 {
		t.Fatalf("route after add: %+v", r)
	}
	has(run(0, tok, "route", "remove", "orders", spare), "orders")
	run(ctl.ExitNotFound, tok, "route", "add", "orders", "nosuch")
	run(ctl.ExitUsage, tok, "route", "add", "orders")

	// Readonly.
	has(run(0, tok, "readonly", "mark", "g1"), "readonly")
	has(run(0, tok, "readonly", "mark", "g1", "--subject", "orders"), "*,orders")
	run(0, tok, "readonly", "unmark", "g1", "--subject", "orders")
	has(run(0, tok, "readonly", "unmark", "g1"), "rw")

	// Consumers and backlog.
	out := run(0, "consumers", "--subject", "orders")
	has(out, "billing", "c1", "10")
	var cgs []api.ConsumerGroup
	if err := json.Unmarshal([]byte(run(0, "consumers", "--json")), &cgs); err != nil || len(cgs) != 1 || cgs[0].Backlog != 10 {
		t.Fatalf("consumers --json: %+v, %v", cgs, err)
	}

	// Offsets and consumer state, relayed to both masters on the route.
	routedMasters := 0
	for _, b := range []*fakeBroker{b1, b2} {
		if routed[b.group] {
			routedMasters++
		}
	}
	for _, to := range []string{"earliest", "latest", "2026-01-02T03:04:05Z"} {
		has(run(0, tok, "offset", "reset", "orders", "billing", "--to", to), "done on")
	}
	// A consumer group nobody knows is not created by a typo.
	out = run(ctl.ExitNotFound, tok, "offset", "reset", "orders", "nosuchgroup", "--to", "latest")
	has(out, `consumer group "nosuchgroup" of subject "orders" does not exist`, "--create")
	has(run(0, tok, "offset", "reset", "orders", "newgroup", "--to", "latest", "--create"), "done on")
	has(run(ctl.ExitNotFound, tok, "consumer", "offline", "orders", "billing", "nosuchid"), `consumer "nosuchid" is not registered in orders/billing`, "c1")
	has(run(ctl.ExitNotFound, "dead", "list", "orders", "nosuchgroup"), `consumer group "nosuchgroup"`)
	has(run(ctl.ExitNotFound, tok, "dead", "redrive", "orders", "billing", "--id", "NOSUCHID"), "no dead letter with id NOSUCHID", "nothing was changed")
	has(run(ctl.ExitNotFound, tok, "dead", "purge", "orders", "nosuchgroup", "--all"), `consumer group "nosuchgroup"`)
	run(ctl.ExitUsage, tok, "offset", "reset", "orders", "billing")
	run(ctl.ExitUsage, tok, "offset", "reset", "orders", "billing", "--to", "someday")
	has(run(0, tok, "consumer", "offline", "orders", "billing", "c1"), "done on")
	if err := json.Unmarshal([]byte(run(0, "consumers", "--json", "--subject", "orders")), &cgs); err != nil || cgs[0].Consumers[0].Online {
		t.Fatalf("consumer not offline after qmqctl consumer offline: %+v, %v", cgs, err)
	}
	has(run(0, tok, "consumer", "online", "orders", "billing", "c1"), "done on")
	var manage int
	for _, b := range []*fakeBroker{b1, b2} {
		manage += len(b.manageRequests())
	}
	if want := routedMasters * 6; manage != want { // three resets, one with --create, offline, online
		t.Fatalf("masters got %d manage requests, want %d", manage, want)
	}

	// Dead letters.
	deadOut := run(0, "dead", "list", "orders", "billing")
	var ids []string
	for _, b := range []*fakeBroker{b1, b2} {
		if routed[b.group] {
			ids = append(ids, "dl-"+b.group)
		}
	}
	has(deadOut, ids...)
	has(run(0, tok, "dead", "inspect", "orders", "billing", ids[0]), "payload of", "attempts")
	run(ctl.ExitUnauthorized, "dead", "inspect", "orders", "billing", ids[0])
	if out := run(0, "dead", "list", "orders", "billing"); strings.Contains(out, "payload of") {
		t.Fatalf("dead list without a credential shows bodies:\n%s", out)
	}
	run(ctl.ExitNotFound, tok, "dead", "inspect", "orders", "billing", "nope")
	run(ctl.ExitUsage, tok, "dead", "redrive", "orders", "billing")
	has(run(0, tok, "dead", "redrive", "orders", "billing", "--id", ids[0]), "1 affected")
	has(run(0, tok, "dead", "purge", "orders", "billing", "--all"), "0 dead letters")
	run(ctl.ExitUnauthorized, "dead", "purge", "orders", "billing", "--all")

	// Bad usage and unknown commands.
	run(ctl.ExitUsage, "frobnicate")
	run(ctl.ExitUsage, "status", "--nosuchflag")
	run(ctl.ExitFailed, "--meta-http=127.0.0.1:1", "status")
}

// TestQmqctl_MetaHTTPAddress: qmqctl names the meta server by its HTTP
// address (--meta-http, $QMQ_META_HTTP, run-local's by default); given the
// TCP address by mistake it says which address it needs and exits 2 instead
// of printing EOF.
func TestQmqctl_MetaHTTPAddress(t *testing.T) {
	s := startServer(t, startEtcd(t), nil)
	if def := ctl.NewCommand(nil).PersistentFlags().Lookup("meta-http").DefValue; def != "127.0.0.1:20980" {
		t.Fatalf("--meta-http defaults to %q, want run-local's 127.0.0.1:20980", def)
	}
	t.Setenv("QMQ_META_HTTP", s.HTTPAddr().String())
	var out, errOut bytes.Buffer
	if code := ctl.Main([]string{"status"}, &out, &errOut); code != 0 {
		t.Fatalf("status with QMQ_META_HTTP: exit %d: %s", code, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	code := ctl.Main([]string{"--meta-http", s.Addr().String(), "status"}, &out, &errOut)
	if code != ctl.ExitUsage || !strings.Contains(errOut.String(), "--meta-http takes the meta server's HTTP address") ||
		!strings.Contains(errOut.String(), "does not answer HTTP") {
		t.Fatalf("status against the TCP address: exit %d, stderr:\n%s", code, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := ctl.Main([]string{"--meta", s.HTTPAddr().String(), "status"}, &out, &errOut); code != 0 ||
		!strings.Contains(errOut.String(), "--meta-http") {
		t.Fatalf("the old --meta: exit %d, stderr:\n%s", code, errOut.String())
	}
}

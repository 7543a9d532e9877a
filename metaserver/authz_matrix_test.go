package metaserver

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
)

// TestAuthzMatrix_MetaTCP is the authorization matrix of the meta server's
// TCP port (issue 29) under --auth: every command it serves (the Mux in
// server.go: policy, lookup, register, client heartbeat, eligible) sent
// with no credential, after a refused CmdAuth on the same connection, and
// by identities that lack the right. Each is refused with its status,
// etcd and the view are unchanged (no fake broker listed, no route made),
// and the refusals are counted in /metrics. A lookup that would give a
// subject its first route needs the right to use the subject.
func TestAuthzMatrix_MetaTCP(t *testing.T) {
	t.Parallel()
	f := newAuthzFixture(t, func(o *Options) { o.RequireAuth = true })
	s := f.s
	addr := s.Addr().String()
	maker := addIdentity(t, s, api.IdentityRequest{Name: "maker", Kind: "app", Grants: api.Grants{
		Publish: []string{"fresh.*"}, Consume: []string{"fresh.*"}, Groups: []string{"makers"}}})

	type command struct {
		name string
		cmd  protocol.Command
		body []byte
		// names is what a forbidden answer must name.
		names string
	}
	register := func(name string, r protocol.RegisterRequest) command {
		return command{name, protocol.CmdRegister, protocol.AppendRegisterRequest(nil, &r), "group " + r.Group}
	}
	lookup := func(name string, q protocol.LookupRequest) command {
		return command{name, protocol.CmdLookup, protocol.AppendLookupRequest(nil, &q), q.Subject}
	}
	heartbeat := func(name string, q protocol.ClientHeartbeatRequest) command {
		return command{name, protocol.CmdClientHeartbeat, protocol.AppendClientHeartbeatRequest(nil, &q), q.Subject + " as group " + q.Group}
	}
	eligible := func(name string, q protocol.EligibleRequest) command {
		return command{name, protocol.CmdEligible, protocol.AppendEligibleRequest(nil, &q), "group " + q.Group}
	}
	impostor := master("g1", "127.0.0.1:6666")
	impostor.BrokerID = "impostor"
	leaving := master("g1", f.b1.addr())
	leaving.Flags = protocol.RegisterLeaving
	leavingG2 := master("g2", f.b2.addr())
	leavingG2.Flags = protocol.RegisterLeaving
	impostorG2 := master("g2", "127.0.0.1:6666")
	impostorG2.BrokerID = "impostor"
	all := map[string]command{
		"policy":                   {"policy", protocol.CmdPolicy, protocol.AppendPolicyRequest(nil, &protocol.PolicyRequest{}), ""},
		"lookup routed":            lookup("lookup routed", protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"}),
		"lookup new (producer)":    lookup("lookup new (producer)", protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "payments"}),
		"lookup new (delay)":       lookup("lookup new (delay)", protocol.LookupRequest{ClientType: protocol.ClientDelayProducer, Subject: "payments"}),
		"lookup new (consumer)":    lookup("lookup new (consumer)", protocol.LookupRequest{ClientType: protocol.ClientConsumer, Subject: "payments", Group: "billing", ClientID: "c9"}),
		"lookup new retry subject": lookup("lookup new retry subject", protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "%RETRY%payments%billing"}),
		"register new group":       register("register new group", master("g3", "127.0.0.1:6666")),
		"register over g1":         register("register over g1", impostor),
		"unregister g1":            register("unregister g1", leaving),
		"register over g2":         register("register over g2", impostorG2),
		"unregister g2":            register("unregister g2", leavingG2),
		"heartbeat other group": heartbeat("heartbeat other group", protocol.ClientHeartbeatRequest{ClientType: protocol.ClientConsumer,
			Subject: "orders", Group: "shipping", ClientID: "c9"}),
		"heartbeat other subject": heartbeat("heartbeat other subject", protocol.ClientHeartbeatRequest{ClientType: protocol.ClientConsumer,
			Subject: "payments", Group: "billing", ClientID: "c9"}),
		"eligible g1": eligible("eligible g1", protocol.EligibleRequest{Group: "g1", BrokerID: "g1-m", Epoch: s.group("g1").Epoch, Slave: "intruder"}),
		"eligible g2": eligible("eligible g2", protocol.EligibleRequest{Group: "g2", BrokerID: "g2-m", Epoch: s.group("g2").Epoch, Slave: "intruder"}),
	}
	pick := func(names ...string) []command {
		out := make([]command, 0, len(names))
		for _, n := range names {
			c, ok := all[n]
			if !ok {
				t.Fatalf("no command %s", n)
			}
			out = append(out, c)
		}
		return out
	}
	every := make([]command, 0, len(all))
	for _, c := range all {
		every = append(every, c)
	}

	before := snapshot(t, s)
	groupsBefore := fmt.Sprint(s.groups())
	metricsBefore := metaRefusalCounts(t, s)

	// No credential: every command is refused unauthenticated.
	anon := newClient(t)
	for _, c := range every {
		if _, err := anon.tr.Call(context.Background(), addr, c.cmd, c.body); !isStatus(err, protocol.StatusUnauthenticated) {
			t.Errorf("%s with no credential: %v, want unauthenticated", c.name, err)
		}
	}
	// A wrong group credential, an unknown identity: the CmdAuth is
	// refused, and every command after it on the connection.
	for _, creds := range []string{"g1:not-the-secret-of-g1-xx", "g3:a-broker-nobody-created"} {
		rc := testutil.DialRaw(t, addr)
		name, secret, _ := strings.Cut(creds, ":")
		body, err := protocol.AppendAuthRequest(nil, &protocol.AuthRequest{Name: name, Secret: secret})
		if err != nil {
			t.Fatal(err)
		}
		if st, msg := rc.Call(protocol.CmdAuth, body); st != protocol.StatusUnauthenticated {
			t.Fatalf("auth as %s with a wrong secret: %v %s", name, st, msg)
		}
		for _, c := range every {
			if st, msg := rc.Call(c.cmd, c.body); st != protocol.StatusUnauthenticated {
				t.Errorf("%s after a failed auth as %s: %v %s, want unauthenticated", c.name, name, st, msg)
			}
		}
	}
	// Identities that lack the right.
	as := func(creds string) *client {
		c := newClient(t)
		c.auth(s, creds)
		return c
	}
	for _, cs := range []struct {
		caller string
		c      *client
		cmds   []command
	}{
		{"app:billing", as(f.app), pick("policy", "lookup new (producer)", "lookup new (delay)", "lookup new (consumer)", "lookup new retry subject",
			"register new group", "register over g1", "unregister g1", "heartbeat other group", "heartbeat other subject", "eligible g1")},
		{"admin:viewer", as(f.viewer), pick("lookup new (producer)", "lookup new (delay)", "lookup new (consumer)", "lookup new retry subject",
			"register new group", "register over g1", "unregister g1", "heartbeat other group", "eligible g1")},
		{"broker:g1", as(f.brokers["g1"]), pick("register new group", "register over g2", "unregister g2", "eligible g2", "heartbeat other group")},
	} {
		for _, c := range cs.cmds {
			_, err := cs.c.tr.Call(context.Background(), addr, c.cmd, c.body)
			switch {
			case !isStatus(err, protocol.StatusForbidden):
				t.Errorf("%s as %s: %v, want forbidden", c.name, cs.caller, err)
			case !strings.Contains(err.Error(), cs.caller) || !strings.Contains(err.Error(), c.names):
				t.Errorf("%s as %s: the refusal %q does not name the identity and %q", c.name, cs.caller, err, c.names)
			}
		}
	}

	if after := snapshot(t, s); after != before {
		t.Fatalf("etcd changed after refused requests:\nbefore %s\nafter  %s", before, after)
	}
	if after := fmt.Sprint(s.groups()); after != groupsBefore {
		t.Fatalf("groups changed after refused requests:\nbefore %s\nafter  %s", groupsBefore, after)
	}
	_, brokers := httpCall(t, s, "GET", "/brokers", "", bearer(testToken))
	if strings.Contains(brokers, "impostor") || strings.Contains(brokers, "6666") || strings.Contains(brokers, `"g3"`) {
		t.Fatalf("a refused registration is listed: %s", brokers)
	}
	if r := s.routes("payments"); len(r) != 0 {
		t.Fatalf("refused lookups made a route: %+v", r)
	}
	// Counted: what netserver refused before a command (no identity, a
	// failed CmdAuth) and what the handlers refused (forbidden).
	metricsAfter := metaRefusalCounts(t, s)
	for _, m := range []string{`qmq_meta_refused_total{reason="unauthenticated"}`, `qmq_meta_refused_total{reason="forbidden"}`,
		`qmq_meta_refusals_total{port="tcp",reason="forbidden"}`} {
		if metricsAfter[m] <= metricsBefore[m] {
			t.Errorf("%s: %v before, %v after the refusals", m, metricsBefore[m], metricsAfter[m])
		}
	}

	// An identity that may publish (consume) a subject gives it its first
	// route; a broker may route any subject (a delay server forwards all).
	mk := as(maker)
	for _, q := range []protocol.LookupRequest{
		{ClientType: protocol.ClientProducer, Subject: "fresh.one"},
		{ClientType: protocol.ClientConsumer, Subject: "fresh.two", Group: "makers", ClientID: "m1"},
	} {
		if resp := mk.mustLookup(s, q); len(resp.Groups) == 0 {
			t.Fatalf("lookup %s by an identity with the right: no groups", q.Subject)
		}
	}
	if resp := as(f.brokers["g2"]).mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "payments"}); len(resp.Groups) == 0 {
		t.Fatal("a broker's lookup made no route")
	}
}

// metaRefusalCounts reads the refusal counters of s's /metrics.
func metaRefusalCounts(t *testing.T, s *Server) map[string]float64 {
	t.Helper()
	_, body := httpCall(t, s, "GET", "/metrics", "", bearer(testToken))
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "qmq_meta_refused_total") && !strings.HasPrefix(line, "qmq_meta_refusals_total") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	if len(out) == 0 {
		t.Fatalf("no refusal counters in /metrics:\n%s", truncate(body, 2000))
	}
	return out
}

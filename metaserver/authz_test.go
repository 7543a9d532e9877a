package metaserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// addIdentity creates an identity through the admin API and returns its
// credentials (name:secret).
func addIdentity(t testing.TB, s *Server, req api.IdentityRequest) string {
	t.Helper()
	out, err := admin(s, testToken).CreateIdentity(context.Background(), req)
	if err != nil {
		t.Fatalf("create identity %s: %v", req.Name, err)
	}
	if out.Secret == "" || out.Credentials != req.Name+":"+out.Secret {
		t.Fatalf("create identity %s: answer %+v", req.Name, out)
	}
	return out.Credentials
}

// httpCall sends method path (under /api/v1 unless it starts with /metrics)
// with body and the Authorization header authz ("" none) and returns the
// status and the body.
func httpCall(t testing.TB, s *Server, method, path, body, authz string) (int, string) {
	t.Helper()
	url := "http://" + s.HTTPAddr().String()
	if !strings.HasPrefix(path, "/metrics") {
		url += "/api/v1"
	}
	req, err := http.NewRequest(method, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func bearer(creds string) string { return "Bearer " + creds }

// brokerState is what the fake brokers were asked to do, to compare
// before and after refused requests.
func brokerState(bs ...*fakeBroker) string {
	var b strings.Builder
	for _, fb := range bs {
		fb.mu.Lock()
		fmt.Fprintf(&b, "%s: manage %d dead %d redriven %d switchovers %d\n", fb.group, len(fb.manage), len(fb.dead), len(fb.redriven), len(fb.switchovers))
		fb.mu.Unlock()
	}
	return b.String()
}

// authzFixture is a meta server with two fake masters, a routed subject, a
// consumer, dead letters and identities of every kind.
type authzFixture struct {
	s                     *Server
	b1, b2                *fakeBroker
	app, viewer, bodyRead string // credentials
	brokers               map[string]string
}

func newAuthzFixture(t *testing.T, mod func(*Options)) *authzFixture {
	t.Helper()
	s := startServer(t, startEtcd(t), mod)
	f := &authzFixture{s: s, b1: startFakeBroker(t, "g1"), b2: startFakeBroker(t, "g2")}
	f.app = addIdentity(t, s, api.IdentityRequest{Name: "billing", Kind: "app",
		Grants: api.Grants{Publish: []string{"orders"}, Consume: []string{"orders"}, Groups: []string{"billing"}}})
	f.viewer = addIdentity(t, s, api.IdentityRequest{Name: "viewer", Kind: "admin", Grants: api.Grants{Admin: "read"}})
	f.bodyRead = addIdentity(t, s, api.IdentityRequest{Name: "auditor", Kind: "admin", Grants: api.Grants{Admin: "read", ReadBodies: true}})
	f.brokers = map[string]string{}
	for _, b := range []*fakeBroker{f.b1, f.b2} {
		f.brokers[b.group] = addIdentity(t, s, api.IdentityRequest{Name: b.group, Kind: "broker"})
		c := newClient(t)
		if s.opts.RequireAuth {
			c.auth(s, f.brokers[b.group])
		}
		c.mustRegister(s, master(b.group, b.addr()))
	}
	eventually(t, 5*time.Second, "two groups", func() bool { return len(s.groups()) == 2 })
	c3 := newClient(t)
	if s.opts.RequireAuth {
		c3.auth(s, f.app)
	}
	c3.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
	if _, err := c3.heartbeat(s, protocol.ClientHeartbeatRequest{ClientType: protocol.ClientConsumer, Subject: "orders", Group: "billing", ClientID: "c1"}); err != nil {
		t.Fatal(err)
	}
	for _, b := range []*fakeBroker{f.b1, f.b2} {
		b.addDeadLetter(t, 1, "orders", "dl-"+b.group, "secret payload of "+b.group)
	}
	eventually(t, 5*time.Second, "consumer registered", func() bool {
		s.view.mu.RLock()
		defer s.view.mu.RUnlock()
		return len(s.view.consumers) == 1
	})
	return f
}

// auth authenticates the client's connection to s (CmdAuth).
func (c *client) auth(s *Server, creds string) {
	c.t.Helper()
	if err := c.tryAuth(s, creds); err != nil {
		c.t.Fatalf("auth %s: %v", strings.SplitN(creds, ":", 2)[0], err)
	}
}

func (c *client) tryAuth(s *Server, creds string) error {
	name, secret, _ := strings.Cut(creds, ":")
	body, err := protocol.AppendAuthRequest(nil, &protocol.AuthRequest{Name: name, Secret: secret})
	if err != nil {
		return err
	}
	_, err = c.tr.Call(context.Background(), s.Addr().String(), protocol.CmdAuth, body)
	return err
}

// TestAuthz_RefusedRequestsChangeNothing tries every endpoint that changes
// something or returns message bodies with no credential, a wrong one, an
// application identity and a read-only admin: each is refused (401, 401,
// 403, 403) with a JSON body naming the request, and neither etcd nor the
// brokers see any change.
func TestAuthz_RefusedRequestsChangeNothing(t *testing.T) {
	t.Parallel()
	f := newAuthzFixture(t, nil)
	s := f.s
	endpoints := []struct{ method, path, body string }{
		{"POST", "/routes/orders/groups", `{"group":"g2"}`},
		{"DELETE", "/routes/orders/groups/g1", ``},
		{"POST", "/groups/g1/readonly", `{}`},
		{"DELETE", "/groups/g1/readonly", ``},
		{"POST", "/groups/g1/switchover", `{"timeoutMillis":1000}`},
		{"POST", "/groups/g1/failover", `{"force":true}`},
		{"POST", "/consumers/orders/billing/reset", `{"to":"earliest"}`},
		{"POST", "/consumers/orders/billing/c1/offline", ``},
		{"POST", "/consumers/orders/billing/c1/online", ``},
		{"GET", "/deadletters/orders/billing/dl-g1", ``},
		{"POST", "/deadletters/orders/billing/redrive", `{}`},
		{"POST", "/deadletters/orders/billing/purge", `{}`},
		{"POST", "/identities", `{"name":"intruder","kind":"admin","grants":{"admin":"write"}}`},
		{"DELETE", "/identities/billing", ``},
		{"POST", "/identities/billing/disable", ``},
		{"POST", "/identities/viewer/enable", ``},
		{"POST", "/identities/billing/rotate", `{}`},
		{"PUT", "/identities/billing/grants", `{"publish":["*"]}`},
		{"POST", "/identities/viewer/grant", `{"admin":"write"}`},
		{"POST", "/identities/billing/revoke", `{"publish":["orders"]}`},
	}
	callers := []struct {
		name, authz string
		want        int
	}{
		{"no credential", "", http.StatusUnauthorized},
		{"wrong secret", bearer("admin:not-the-admin-token"), http.StatusUnauthorized},
		{"wrong bare token", bearer("not-the-admin-token"), http.StatusUnauthorized},
		{"unknown identity (basic)", "Basic " + base64.StdEncoding.EncodeToString([]byte("nobody:whatever-secret-x")), http.StatusUnauthorized},
		{"application", bearer(f.app), http.StatusForbidden},
		{"read-only admin", bearer(f.viewer), http.StatusForbidden},
	}
	before, beforeBrokers := snapshot(t, s), brokerState(f.b1, f.b2)
	for _, e := range endpoints {
		for _, c := range callers {
			status, body := httpCall(t, s, e.method, e.path, e.body, c.authz)
			if status != c.want {
				t.Errorf("%s %s as %s: HTTP %d, want %d: %s", e.method, e.path, c.name, status, c.want, body)
				continue
			}
			var ae api.Error
			if err := json.Unmarshal([]byte(body), &ae); err != nil || ae.Error == "" || ae.Refused != e.method+" /api/v1"+e.path || ae.Needs == "" {
				t.Errorf("%s %s as %s: refusal body %q (%v)", e.method, e.path, c.name, body, err)
			}
			if strings.Contains(body, "secret payload") {
				t.Errorf("%s %s as %s: a refusal carries a body", e.method, e.path, c.name)
			}
		}
	}
	if after := snapshot(t, s); after != before {
		t.Fatalf("etcd changed after refused requests:\nbefore %s\nafter  %s", before, after)
	}
	if after := brokerState(f.b1, f.b2); after != beforeBrokers {
		t.Fatalf("brokers were asked to act by refused requests:\nbefore %s\nafter  %s", beforeBrokers, after)
	}

	// Identity reads: admin read, always.
	for _, c := range callers[:5] {
		for _, path := range []string{"/identities", "/identities/billing"} {
			if status, body := httpCall(t, s, "GET", path, "", c.authz); status != c.want {
				t.Errorf("GET %s as %s: HTTP %d, want %d: %s", path, c.name, status, c.want, body)
			}
		}
	}
	status, body := httpCall(t, s, "GET", "/identities", "", bearer(f.viewer))
	if status != http.StatusOK || !strings.Contains(body, `"billing"`) || strings.Contains(body, "salt") || strings.Contains(body, `"hash"`) {
		t.Fatalf("identities as a read admin: %d %s", status, body)
	}

	// Bodies: a listing without the right hides them; the body reader and
	// the admin see them.
	for _, authz := range []string{"", bearer(f.app), bearer(f.viewer)} {
		status, body := httpCall(t, s, "GET", "/deadletters/orders/billing", "", authz)
		if status != http.StatusOK || strings.Contains(body, "secret payload") || !strings.Contains(body, `"bodyHidden": true`) {
			t.Fatalf("dead-letter listing as %q: %d %s", authz, status, body)
		}
	}
	for _, authz := range []string{bearer(f.bodyRead), bearer(testToken), "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:"+testToken))} {
		if status, body := httpCall(t, s, "GET", "/deadletters/orders/billing/dl-g1", "", authz); status != http.StatusOK || !strings.Contains(body, "secret payload") {
			t.Fatalf("inspect as %q: %d %s", authz, status, body)
		}
	}
	// Open reads stay open without --auth, for anyone who authenticates.
	for _, authz := range []string{"", bearer(f.app)} {
		if status, body := httpCall(t, s, "GET", "/groups", "", authz); status != http.StatusOK {
			t.Fatalf("GET /groups as %q: %d %s", authz, status, body)
		}
	}
	// The refusals are counted by reason.
	_, metrics := httpCall(t, s, "GET", "/metrics", "", "")
	for _, reason := range []string{reasonNoCredential, reasonBadCredential, reasonForbidden} {
		if !strings.Contains(metrics, `qmq_meta_refusals_total{port="http",reason="`+reason+`"}`) ||
			strings.Contains(metrics, `qmq_meta_refusals_total{port="http",reason="`+reason+`"} 0`) {
			t.Fatalf("refusals by %s not counted:\n%s", reason, grepLines(metrics, "refusals"))
		}
	}
}

// TestAuthz_AuthRequiredGuardsReadsAndTCP runs a meta server with --auth:
// reads need admin read, and every TCP command an authenticated identity
// with the right (a registration as another group's broker, a heartbeat
// for a group the application does not own and a policy fetch by an
// application are refused and change nothing).
func TestAuthz_AuthRequiredGuardsReadsAndTCP(t *testing.T) {
	t.Parallel()
	f := newAuthzFixture(t, func(o *Options) { o.RequireAuth = true })
	s := f.s
	for _, path := range []string{"/status", "/groups", "/brokers", "/routes", "/routes/orders", "/consumers", "/deadletters/orders/billing", "/metrics"} {
		for _, c := range []struct {
			name, authz string
			want        int
		}{
			{"no credential", "", http.StatusUnauthorized},
			{"application", bearer(f.app), http.StatusForbidden},
			{"read-only admin", bearer(f.viewer), http.StatusOK},
			{"admin token", bearer(testToken), http.StatusOK},
		} {
			if status, body := httpCall(t, s, "GET", path, "", c.authz); status != c.want {
				t.Errorf("GET %s as %s: HTTP %d, want %d: %s", path, c.name, status, c.want, truncate(body, 200))
			}
		}
	}
	if status, body := httpCall(t, s, "GET", "/whoami", "", ""); status != http.StatusOK || !strings.Contains(body, `"authRequired": true`) {
		t.Fatalf("whoami: %d %s", status, body)
	}
	w, err := admin(s, f.viewer).Whoami(context.Background())
	if err != nil || !w.Authenticated || w.Name != "viewer" || w.Admin != "read" || !w.CanRead || w.CanWrite || w.CanReadBodies {
		t.Fatalf("whoami as viewer: %+v %v", w, err)
	}

	before := snapshot(t, s)
	anon := newClient(t)
	if _, err := anon.lookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"}); !isStatus(err, protocol.StatusUnauthenticated) {
		t.Fatalf("anonymous lookup: %v", err)
	}
	if _, err := anon.register(s, master("g3", "127.0.0.1:1003")); !isStatus(err, protocol.StatusUnauthenticated) {
		t.Fatalf("anonymous register: %v", err)
	}
	if err := anon.tryAuth(s, "g1:wrong-secret-0000000"); !isStatus(err, protocol.StatusUnauthenticated) {
		t.Fatalf("auth with a wrong secret: %v", err)
	}
	if _, err := anon.register(s, master("g3", "127.0.0.1:1003")); !isStatus(err, protocol.StatusUnauthenticated) {
		t.Fatalf("register after a failed auth: %v", err)
	}

	// A broker of g1 registering (or heartbeating) as g2 is refused.
	g1 := newClient(t)
	g1.auth(s, f.brokers["g1"])
	req := master("g2", "127.0.0.1:6666")
	req.BrokerID = "impostor"
	if _, err := g1.register(s, req); !isStatus(err, protocol.StatusForbidden) {
		t.Fatalf("register as another group: %v", err)
	}
	req.Flags = protocol.RegisterLeaving
	if _, err := g1.register(s, req); !isStatus(err, protocol.StatusForbidden) {
		t.Fatalf("unregister another group: %v", err)
	}
	// The application may look up, heartbeat for its group, not another.
	app := newClient(t)
	app.auth(s, f.app)
	app.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientConsumer, Subject: "orders", Group: "billing"})
	if _, err := app.heartbeat(s, protocol.ClientHeartbeatRequest{ClientType: protocol.ClientConsumer, Subject: "orders", Group: "shipping", ClientID: "c9"}); !isStatus(err, protocol.StatusForbidden) {
		t.Fatalf("heartbeat for a group the app does not own: %v", err)
	}
	if _, err := app.register(s, master("g3", "127.0.0.1:1003")); !isStatus(err, protocol.StatusForbidden) {
		t.Fatalf("an application registering a broker: %v", err)
	}
	if _, err := app.tr.Call(context.Background(), s.Addr().String(), protocol.CmdPolicy, protocol.AppendPolicyRequest(nil, &protocol.PolicyRequest{})); !isStatus(err, protocol.StatusForbidden) {
		t.Fatalf("an application fetching the policy: %v", err)
	}
	if after := snapshot(t, s); after != before {
		t.Fatalf("etcd changed after refused TCP requests:\nbefore %s\nafter  %s", before, after)
	}
	if g := s.group("g2"); g.MasterID != "g2-m" {
		t.Fatalf("g2's master is %q after an impostor's attempts", g.MasterID)
	}
	// A disabled identity's connection loses its rights at once.
	if _, err := admin(s, testToken).SetIdentityEnabled(context.Background(), "billing", false); err != nil {
		t.Fatal(err)
	}
	if _, err := app.lookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"}); !isStatus(err, protocol.StatusUnauthenticated) {
		t.Fatalf("lookup by a disabled identity: %v", err)
	}
	_, metrics := httpCall(t, s, "GET", "/metrics", "", bearer(testToken))
	if !strings.Contains(metrics, `qmq_meta_refusals_total{port="tcp",reason="forbidden"}`) ||
		strings.Contains(metrics, `qmq_meta_refusals_total{port="tcp",reason="forbidden"} 0`) {
		t.Fatalf("TCP refusals not counted:\n%s", grepLines(metrics, "refusals"))
	}
}

// TestAuthz_OpenServerStillChecksNamedIdentities: without --auth a
// connection that names no identity may do everything, but one that
// authenticated is held to its identity's rights, and the policy is served
// to brokers and admins only.
func TestAuthz_OpenServerStillChecksNamedIdentities(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	rt1 := addIdentity(t, s, api.IdentityRequest{Name: "rt1", Kind: "broker"})
	before := snapshot(t, s)
	anon := newClient(t)
	if _, err := anon.tr.Call(context.Background(), s.Addr().String(), protocol.CmdPolicy, protocol.AppendPolicyRequest(nil, &protocol.PolicyRequest{})); !isStatus(err, protocol.StatusUnauthenticated) {
		t.Fatalf("anonymous policy fetch: %v", err)
	}
	b := newClient(t)
	b.auth(s, rt1)
	if _, err := b.register(s, master("rt2", "127.0.0.1:1002")); !isStatus(err, protocol.StatusForbidden) {
		t.Fatalf("rt1 registering rt2: %v", err)
	}
	if after := snapshot(t, s); after != before {
		t.Fatalf("etcd changed:\nbefore %s\nafter  %s", before, after)
	}
	b.mustRegister(s, master("rt1", "127.0.0.1:1001"))
	anon.mustRegister(s, master("rt3", "127.0.0.1:1003"))
	body, err := b.tr.Call(context.Background(), s.Addr().String(), protocol.CmdPolicy, protocol.AppendPolicyRequest(nil, &protocol.PolicyRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	pr, err := protocol.DecodePolicyResponse(body)
	if err != nil {
		t.Fatal(err)
	}
	p, err := auth.ParsePolicy(pr.Policy)
	if err != nil || p.Version() != s.Authority().Version() || p.Len() != 2 {
		t.Fatalf("policy %v (version %d, %d identities), server at %d", err, p.Version(), p.Len(), s.Authority().Version())
	}
}

func isStatus(err error, st protocol.Status) bool {
	var pe *protocol.Error
	return errors.As(err, &pe) && pe.Status == st
}

// TestIdentities_CRUD exercises every identity change through the API and
// what each does to authentication.
func TestIdentities_CRUD(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	ctx := context.Background()
	root := admin(s, testToken)

	out, err := root.CreateIdentity(ctx, api.IdentityRequest{Name: "billing", Kind: "app", Grants: api.Grants{Publish: []string{"order.*"}}})
	if err != nil || len(out.Secret) != 43 || !out.Identity.HasSecret || out.Identity.Kind != "app" {
		t.Fatalf("create: %+v %v", out, err)
	}
	creds := out.Credentials
	w, err := admin(s, creds).Whoami(ctx)
	if err != nil || w.Name != "billing" || w.Kind != "app" || w.CanWrite || w.CanReadIdentities {
		t.Fatalf("whoami as the new identity: %+v %v", w, err)
	}
	if _, err := root.CreateIdentity(ctx, api.IdentityRequest{Name: "billing", Kind: "app"}); !api.IsConflict(err) {
		t.Fatalf("duplicate: %v", err)
	}
	// A chosen secret is taken and not echoed.
	chosen, err := root.CreateIdentity(ctx, api.IdentityRequest{Name: "rt1", Kind: "broker", Secret: "a-chosen-secret-of-rt1"})
	if err != nil || chosen.Secret != "" || chosen.Identity.Group != "rt1" {
		t.Fatalf("create with a chosen secret: %+v %v", chosen, err)
	}
	if w, err := admin(s, "rt1:a-chosen-secret-of-rt1").Whoami(ctx); err != nil || w.Kind != "broker" || w.Group != "rt1" {
		t.Fatalf("whoami rt1: %+v %v", w, err)
	}
	cert, err := root.CreateIdentity(ctx, api.IdentityRequest{Name: "certapp", Kind: "app", NoSecret: true})
	if err != nil || cert.Secret != "" || cert.Identity.HasSecret {
		t.Fatalf("certificate-only identity: %+v %v", cert, err)
	}
	for name, req := range map[string]api.IdentityRequest{
		"bad name":        {Name: "a b", Kind: "app"},
		"bad kind":        {Name: "x", Kind: "robot"},
		"short secret":    {Name: "x", Kind: "app", Secret: "short"},
		"bad pattern":     {Name: "x", Kind: "app", Grants: api.Grants{Publish: []string{"a*b"}}},
		"admin role app":  {Name: "x", Kind: "app", Grants: api.Grants{Admin: "write"}},
		"bad role":        {Name: "x", Kind: "admin", Grants: api.Grants{Admin: "root"}},
		"secret and none": {Name: "x", Kind: "app", Secret: "a-chosen-secret-xxxx", NoSecret: true},
	} {
		if _, err := root.CreateIdentity(ctx, req); !api.IsBadRequest(err) {
			t.Errorf("%s: %v, want 400", name, err)
		}
	}

	// List and show never carry a hash.
	ids, err := root.Identities(ctx)
	if err != nil || len(ids) != 4 || ids[0].Name != "admin" || ids[1].Name != "billing" {
		t.Fatalf("list: %+v %v", ids, err)
	}
	_, raw := httpCall(t, s, "GET", "/identities", "", bearer(testToken))
	if strings.Contains(raw, "salt") || strings.Contains(raw, "pbkdf2") {
		t.Fatalf("the listing carries secret hashes: %s", raw)
	}
	if _, err := root.Identity(ctx, "nosuch"); !api.IsNotFound(err) {
		t.Fatalf("show unknown: %v", err)
	}

	// Disable, enable.
	if id, err := root.SetIdentityEnabled(ctx, "billing", false); err != nil || !id.Disabled {
		t.Fatalf("disable: %+v %v", id, err)
	}
	if _, err := admin(s, creds).Whoami(ctx); !api.IsUnauthorized(err) {
		t.Fatalf("a disabled identity authenticates: %v", err)
	}
	if _, err := root.SetIdentityEnabled(ctx, "billing", true); err != nil {
		t.Fatal(err)
	}
	if _, err := admin(s, creds).Whoami(ctx); err != nil {
		t.Fatalf("re-enabled: %v", err)
	}
	// Rotate: the old secret stops working.
	rot, err := root.RotateSecret(ctx, "billing", "")
	if err != nil || rot.Secret == "" || rot.Credentials == creds {
		t.Fatalf("rotate: %+v %v", rot, err)
	}
	if _, err := admin(s, creds).Whoami(ctx); !api.IsUnauthorized(err) {
		t.Fatalf("the old secret after rotation: %v", err)
	}
	if _, err := admin(s, rot.Credentials).Whoami(ctx); err != nil {
		t.Fatalf("the new secret: %v", err)
	}
	// Grants: add, revoke, replace.
	id, err := root.Grant(ctx, "billing", api.Grants{Consume: []string{"order.*"}, Groups: []string{"billing"}, Publish: []string{"order.*", "invoice"}})
	if err != nil || strings.Join(id.Grants.Publish, ",") != "order.*,invoice" || len(id.Grants.Consume) != 1 {
		t.Fatalf("grant: %+v %v", id.Grants, err)
	}
	p, err := s.Authority().Authenticate("billing", rot.Secret)
	if err != nil || !p.CanConsume("order.x", "billing") || !p.CanPublish("invoice") {
		t.Fatalf("grants not in the policy: %v", err)
	}
	id, err = root.Revoke(ctx, "billing", api.Revoke{Publish: []string{"invoice"}})
	if err != nil || strings.Join(id.Grants.Publish, ",") != "order.*" {
		t.Fatalf("revoke: %+v %v", id.Grants, err)
	}
	if _, err := root.Grant(ctx, "billing", api.Grants{Admin: "read"}); !api.IsBadRequest(err) {
		t.Fatalf("admin role for an app: %v", err)
	}
	id, err = root.SetGrants(ctx, "billing", api.Grants{Publish: []string{"x"}})
	if err != nil || len(id.Grants.Consume) != 0 || id.Grants.Publish[0] != "x" {
		t.Fatalf("set grants: %+v %v", id.Grants, err)
	}
	// A read admin promoted to write may change things.
	viewer := addIdentity(t, s, api.IdentityRequest{Name: "viewer", Kind: "admin", Grants: api.Grants{Admin: "read"}})
	if _, err := admin(s, viewer).SetIdentityEnabled(ctx, "billing", false); !api.IsForbidden(err) {
		t.Fatalf("read admin changing: %v", err)
	}
	if _, err := root.Grant(ctx, "viewer", api.Grants{Admin: "write"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin(s, viewer).SetIdentityEnabled(ctx, "billing", false); err != nil {
		t.Fatalf("promoted admin changing: %v", err)
	}

	// The last enabled writer cannot be removed, disabled or demoted.
	if _, err := root.Revoke(ctx, "viewer", api.Revoke{Admin: true}); err != nil {
		t.Fatal(err)
	}
	for name, fn := range map[string]func() error{
		"delete":  func() error { _, err := root.DeleteIdentity(ctx, "admin"); return err },
		"disable": func() error { _, err := root.SetIdentityEnabled(ctx, "admin", false); return err },
		"demote":  func() error { _, err := root.SetGrants(ctx, "admin", api.Grants{Admin: "read"}); return err },
	} {
		if err := fn(); !api.IsConflict(err) {
			t.Errorf("%s the last admin: %v, want 409", name, err)
		}
	}
	// Delete.
	if _, err := root.DeleteIdentity(ctx, "billing"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin(s, rot.Credentials).Whoami(ctx); !api.IsUnauthorized(err) {
		t.Fatalf("a deleted identity authenticates: %v", err)
	}
	if _, err := root.DeleteIdentity(ctx, "billing"); !api.IsNotFound(err) {
		t.Fatalf("delete twice: %v", err)
	}
}

// TestIdentities_AdminTokenRestoredAtStart: a meta server makes sure
// identity admin holds its token when it starts, even after someone
// rotated or disabled it, and a second server with the same token writes
// nothing.
func TestIdentities_AdminTokenRestoredAtStart(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	s := startServer(t, ep, nil)
	ctx := context.Background()
	addIdentity(t, s, api.IdentityRequest{Name: "ops", Kind: "admin", Grants: api.Grants{Admin: "write"}})
	if _, err := admin(s, testToken).RotateSecret(ctx, "admin", "a-different-admin-secret"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin(s, testToken).Status(ctx); !api.IsUnauthorized(err) {
		t.Fatalf("the old token after rotation: %v", err)
	}
	_, modBefore, _ := s.view.identity("admin")
	s2 := startServer(t, ep, nil)
	if _, err := admin(s2, testToken).MarkReadonly(ctx, "nosuch", ""); !api.IsNotFound(err) {
		t.Fatalf("the token after a restart: %v (want it to authenticate: 404 for the unknown group)", err)
	}
	_, modAfter, _ := s2.view.identity("admin")
	if modAfter <= modBefore {
		t.Fatal("identity admin was not rewritten")
	}
	s3 := startServer(t, ep, nil)
	if _, rev, _ := s3.view.identity("admin"); rev != modAfter {
		t.Fatalf("a server with the same token rewrote identity admin (%d → %d)", modAfter, rev)
	}
}

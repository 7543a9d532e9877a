package auth

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"testing"
)

func TestMain(m *testing.M) {
	hashIterations = 1000 // the least validate accepts: the tests check logic, not cost
	os.Exit(m.Run())
}

func mustHash(t *testing.T, secret string) *SecretHash {
	t.Helper()
	h, err := HashSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func testPolicy(t *testing.T, version uint64) *Policy {
	t.Helper()
	p, err := NewPolicy(version, []Entry{
		{Name: "billing", Kind: KindApp, Secret: mustHash(t, "billing-secret-0123"),
			Grants: Grants{Publish: []string{"order.*", "invoice"}, Consume: []string{"order.*"}, Groups: []string{"billing", "billing-*"}}},
		{Name: "rt1", Kind: KindBroker, Group: "rt1", Secret: mustHash(t, "broker-secret-0123")},
		{Name: "viewer", Kind: KindAdmin, Secret: mustHash(t, "viewer-secret-0123"), Grants: Grants{Admin: AdminRead}},
		{Name: "off", Kind: KindApp, Secret: mustHash(t, "off-secret-0123456"), Disabled: true},
		{Name: "certonly", Kind: KindApp, Grants: Grants{Consume: []string{"*"}, Groups: []string{"*"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrincipal_Grants(t *testing.T) {
	a := NewAuthority(testPolicy(t, 7))
	app, err := a.Authenticate("billing", "billing-secret-0123")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		got  bool
		want bool
	}{
		{"publish order.created", app.CanPublish("order.created"), true},
		{"publish invoice", app.CanPublish("invoice"), true},
		{"publish invoices", app.CanPublish("invoices"), false},
		{"publish user.x", app.CanPublish("user.x"), false},
		{"consume order.x as billing", app.CanConsume("order.x", "billing"), true},
		{"consume order.x as billing-eu", app.CanConsume("order.x", "billing-eu"), true},
		{"consume order.x as other", app.CanConsume("order.x", "other"), false},
		{"consume invoice as billing", app.CanConsume("invoice", "billing"), false},
		{"publish own retry", app.CanPublish("%RETRY%order.x%billing"), true},
		{"publish other group's retry", app.CanPublish("%RETRY%order.x%other"), false},
		{"publish own dead", app.CanPublish("%DEAD%order.x%billing"), true},
		{"consume own retry", app.CanConsume("%RETRY%order.x%billing", "billing"), true},
		{"consume retry as another group", app.CanConsume("%RETRY%order.x%billing", "billing-eu"), false},
		{"publish other system subject", app.CanPublish("%SYS%x"), false},
		{"admin read", app.CanAdminRead(), false},
		{"read bodies", app.CanReadBodies(), false},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	viewer, err := a.Authenticate("viewer", "viewer-secret-0123")
	if err != nil {
		t.Fatal(err)
	}
	if !viewer.CanAdminRead() || viewer.CanAdminWrite() || viewer.CanReadBodies() || viewer.CanPublish("x") {
		t.Fatalf("read-only admin: read %v write %v bodies %v publish %v", viewer.CanAdminRead(), viewer.CanAdminWrite(), viewer.CanReadBodies(), viewer.CanPublish("x"))
	}
	broker, err := a.Authenticate("rt1", "broker-secret-0123")
	if err != nil {
		t.Fatal(err)
	}
	if !broker.IsBrokerOf("rt1") || broker.IsBrokerOf("rt2") || !broker.CanPublish("any.subject") || broker.CanAdminRead() {
		t.Fatal("broker rights wrong")
	}
	if !Open.CanPublish("x") || !Open.CanConsume("x", "g") || !Open.CanAdminWrite() || !Open.IsBrokerOf("g") {
		t.Fatal("Open must allow everything")
	}
}

func TestAuthority_Authenticate_Refuses(t *testing.T) {
	a := NewAuthority(testPolicy(t, 1))
	for _, c := range []struct {
		name, secret string
		want         error
	}{
		{"nobody", "whatever-secret-x", ErrUnknownIdentity},
		{"billing", "wrong-secret-00000", ErrBadSecret},
		{"off", "off-secret-0123456", ErrDisabled},
		{"certonly", "anything-at-all-00", ErrNoSecret},
	} {
		if _, err := a.Authenticate(c.name, c.secret); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := NewAuthority(nil).Authenticate("billing", "billing-secret-0123"); !errors.Is(err, ErrUnknownIdentity) {
		t.Fatalf("no policy: %v", err)
	}
}

func TestAuthority_CachesPerVersion(t *testing.T) {
	a := NewAuthority(testPolicy(t, 1))
	if _, err := a.Authenticate("billing", "billing-secret-0123"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate("billing", "wrong-secret-00000"); !errors.Is(err, ErrBadSecret) {
		t.Fatalf("a wrong secret after a right one: %v", err)
	}
	// A new policy in which billing has another secret: the old one must fail.
	p2, err := NewPolicy(2, []Entry{{Name: "billing", Kind: KindApp, Secret: mustHash(t, "rotated-secret-0123")}})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Update(p2) || a.Update(testPolicy(t, 1)) {
		t.Fatal("Update must take newer policies only")
	}
	if _, err := a.Authenticate("billing", "billing-secret-0123"); !errors.Is(err, ErrBadSecret) {
		t.Fatalf("old secret after rotation: %v", err)
	}
	if _, err := a.Authenticate("billing", "rotated-secret-0123"); err != nil {
		t.Fatal(err)
	}
}

// A policy change that leaves an identity's secret alone (a grant added,
// another identity created) keeps its verified secret: a reconnect costs no
// slow hash. A new secret does not match the cached one.
func TestAuthority_CacheOutlivesUnrelatedPolicyChanges(t *testing.T) {
	p1 := testPolicy(t, 1)
	a := NewAuthority(p1)
	if _, err := a.Authenticate("billing", "billing-secret-0123"); err != nil {
		t.Fatal(err)
	}
	if n := a.slowHashes.Load(); n != 1 {
		t.Fatalf("%d slow hashes, want 1", n)
	}
	e := p1.entries["billing"]
	grants := e.Grants
	grants.Publish = append(append([]string(nil), grants.Publish...), "more.*")
	p2, err := NewPolicy(2, []Entry{{Name: "billing", Kind: KindApp, Secret: e.Secret, Grants: grants}})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Update(p2) {
		t.Fatal("Update refused a newer policy")
	}
	pr, err := a.Authenticate("billing", "billing-secret-0123")
	if err != nil {
		t.Fatal(err)
	}
	if n := a.slowHashes.Load(); n != 1 {
		t.Fatalf("%d slow hashes after an unrelated policy change, want still 1", n)
	}
	if pr.Version != 2 {
		t.Fatalf("principal of version %d, want the new policy's", pr.Version)
	}
	if _, err := a.Authenticate("billing", "wrong-secret-00000"); !errors.Is(err, ErrBadSecret) {
		t.Fatalf("a wrong secret: %v", err)
	}
	if n := a.slowHashes.Load(); n != 2 {
		t.Fatalf("%d slow hashes after a wrong secret, want 2", n)
	}
}

func TestAuthority_Refresh(t *testing.T) {
	a := NewAuthority(testPolicy(t, 1))
	old, err := a.Authenticate("billing", "billing-secret-0123")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := a.Refresh(old); err != nil || p != old {
		t.Fatalf("same version: %v %v", p, err)
	}
	p2, _ := NewPolicy(2, []Entry{{Name: "billing", Kind: KindApp, Disabled: true}})
	a.Update(p2)
	if _, err := a.Refresh(old); !errors.Is(err, ErrDisabled) {
		t.Fatalf("disabled: %v", err)
	}
	p3, _ := NewPolicy(3, nil)
	a.Update(p3)
	if _, err := a.Refresh(old); !errors.Is(err, ErrUnknownIdentity) {
		t.Fatalf("removed: %v", err)
	}
}

func TestCertificateIdentity(t *testing.T) {
	p := testPolicy(t, 3)
	cert := func(kind Kind, name string) *x509.Certificate {
		return &x509.Certificate{URIs: []*url.URL{IdentityURI(kind, name)}}
	}
	b, err := p.Certificate(cert(KindBroker, "rt9"))
	if err != nil || !b.IsBrokerOf("rt9") {
		t.Fatalf("broker cert: %v %v", b, err)
	}
	ad, err := p.Certificate(cert(KindAdmin, "alice"))
	if err != nil || !ad.CanAdminWrite() {
		t.Fatalf("admin cert: %v", err)
	}
	app, err := p.Certificate(cert(KindApp, "certonly"))
	if err != nil || !app.CanConsume("x", "y") || app.CanPublish("x") {
		t.Fatalf("app cert with an entry: %v", err)
	}
	stranger, err := p.Certificate(cert(KindApp, "stranger"))
	if err != nil || stranger.CanPublish("x") || stranger.CanConsume("x", "y") {
		t.Fatalf("app cert without an entry must have no grants: %v", err)
	}
	if _, err := p.Certificate(cert(KindApp, "off")); !errors.Is(err, ErrDisabled) {
		t.Fatalf("disabled entry: %v", err)
	}
	if _, err := p.Certificate(&x509.Certificate{}); !errors.Is(err, ErrBadCertificate) {
		t.Fatalf("no URI: %v", err)
	}
}

func TestPolicy_JSONRoundTrip(t *testing.T) {
	p := testPolicy(t, 42)
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	q, err := ParsePolicy(b)
	if err != nil {
		t.Fatal(err)
	}
	if q.Version() != 42 || q.Len() != p.Len() {
		t.Fatalf("version %d len %d", q.Version(), q.Len())
	}
	if _, err := q.Authenticate("billing", "billing-secret-0123"); err != nil {
		t.Fatalf("secret after round trip: %v", err)
	}
	if _, err := ParsePolicy([]byte(`{"version":1,"identities":[{"name":"a b","kind":"app"}]}`)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad name accepted: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, p := range []string{"*", "order.*", "a", "x-y_z.1*"} {
		if err := ValidatePattern(p); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
	for _, p := range []string{"", "a*b", "**", "a b", "%RETRY%"} {
		if err := ValidatePattern(p); err == nil {
			t.Errorf("%q accepted", p)
		}
	}
	for _, e := range []Entry{
		{Name: "a", Kind: KindApp, Group: "g"},
		{Name: "b", Kind: KindBroker},
		{Name: "c", Kind: KindApp, Grants: Grants{Admin: AdminWrite}},
		{Name: "", Kind: KindApp},
		{Name: "d", Kind: 9},
	} {
		if err := e.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", e, err)
		}
	}
	if _, err := HashSecret("short"); !errors.Is(err, ErrInvalid) {
		t.Fatal("short secret accepted")
	}
}

func TestCredentials(t *testing.T) {
	c, err := ParseCredentials("billing:abc:def\n")
	if err != nil || c.Name != "billing" || c.Secret != "abc:def" {
		t.Fatalf("%+v %v", c, err)
	}
	for _, s := range []string{"", "nosecret", "name:", ":secret", "bad name:x"} {
		if _, err := ParseCredentials(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "cred")
	if err := os.WriteFile(path, []byte("billing:s3cret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCredentialsFile(path); !errors.Is(err, ErrInvalid) {
		t.Fatalf("world-readable credentials accepted: %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := ReadCredentialsFile(path); err != nil || c.Secret != "s3cret" {
		t.Fatalf("%+v %v", c, err)
	}
	s1, _ := GenerateSecret()
	s2, _ := GenerateSecret()
	if len(s1) != 43 || s1 == s2 {
		t.Fatalf("generated %q %q", s1, s2)
	}
}

func TestSplitSystemSubject(t *testing.T) {
	for _, c := range []struct{ in, subject, group string }{
		{"%RETRY%order.x%billing", "order.x", "billing"},
		{"%DEAD%a%b", "a", "b"},
	} {
		s, g, ok := SplitSystemSubject(c.in)
		if !ok || s != c.subject || g != c.group {
			t.Errorf("%q: %q %q %v", c.in, s, g, ok)
		}
	}
	for _, in := range []string{"order", "%RETRY%", "%RETRY%x", "%RETRY%x%", "%DEAD%%g"} {
		if _, _, ok := SplitSystemSubject(in); ok {
			t.Errorf("%q split", in)
		}
	}
}

func TestHashSecretAnyLength(t *testing.T) {
	h, err := HashSecretAnyLength("t")
	if err != nil || !h.Verify("t") || h.Verify("u") {
		t.Fatalf("short bootstrap secret: %v", err)
	}
	if _, err := HashSecretAnyLength(""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty secret: %v", err)
	}
	if err := CheckSecret(string(make([]byte, MaxSecretLen+1))); !errors.Is(err, ErrInvalid) {
		t.Fatalf("over-long secret: %v", err)
	}
}

func TestAuthority_Replace(t *testing.T) {
	a := NewAuthority(testPolicy(t, 9))
	old, _ := NewPolicy(2, nil)
	if a.Update(old) {
		t.Fatal("Update took an older policy")
	}
	a.Replace(old)
	if a.Version() != 2 {
		t.Fatalf("version %d after Replace, want 2", a.Version())
	}
}

func TestWriteSecretFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "token")
	if err := os.WriteFile(path+".tmp", []byte("stale"), 0o644); err == nil {
		t.Fatal("the directory should not exist yet")
	}
	if err := WriteSecretFile(path, []byte("s3cret-s3cret-s3cret\n")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".tmp", []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteSecretFile(path, []byte("second-second-second\n")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	di, _ := os.Stat(filepath.Dir(path))
	if di.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %v", di.Mode())
	}
	if s, err := ReadSecretFile(path); err != nil || s != "second-second-second" {
		t.Fatalf("read back %q, %v", s, err)
	}
}

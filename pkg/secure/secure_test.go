package secure

import (
	"crypto/tls"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/exposure"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/pkg/transport"
)

func TestOptions_Validate(t *testing.T) {
	for _, c := range []struct {
		name string
		o    Options
		addr string
		ok   bool
	}{
		{"loopback plaintext", Options{}, "127.0.0.1:20881", true},
		{"exposed plaintext", Options{}, "0.0.0.0:20881", false},
		{"exposed TLS without auth", Options{TLS: tlsconfig.Files{Cert: "c", Key: "k"}}, ":20881", false},
		{"exposed TLS and auth", Options{TLS: tlsconfig.Files{Cert: "c", Key: "k"}, RequireAuth: true}, ":20881", true},
		{"exposed, insecure", Options{Insecure: true}, "10.0.0.1:20881", true},
	} {
		err := c.o.Validate(c.addr, "127.0.0.1:0")
		if c.ok != (err == nil) || (!c.ok && !errors.Is(err, exposure.ErrInsecureListener)) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if err := (&Options{Limits: Limits{MaxConns: -1}}).Validate(); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("negative MaxConns: %v", err)
	}
	if err := (&Options{TLS: tlsconfig.Files{Cert: "c"}}).Validate(); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("a certificate without its key: %v", err)
	}
}

func TestOptions_BuildAndWire(t *testing.T) {
	ca := testutil.NewCA(t)
	node := ca.Issue(t, testutil.CertOptions{Name: "node", Hosts: []string{"127.0.0.1"}, Both: true, URIs: []string{"qmq://broker/rt1"}})
	dir := t.TempDir()
	creds := filepath.Join(dir, "creds")
	if err := os.WriteFile(creds, []byte("rt1:broker-secret-000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := Options{TLS: tlsconfig.Files{CA: ca.CAFile, Cert: node.CertFile, Key: node.KeyFile}, RequireAuth: true,
		CredentialsFile: creds, Limits: Limits{MaxConnsPerIdentity: 7}}
	k, err := o.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	if k.ServerTLS == nil || k.ClientTLS == nil || k.Credentials == nil || k.Credentials.Name != "rt1" {
		t.Fatalf("kit %+v", k)
	}
	var no netserver.Options
	a := auth.NewAuthority(nil)
	k.Listener(&no, a)
	if no.TLS == nil || !no.RequireAuth || no.Auth == nil || no.MaxConnsPerIdentity != 7 {
		t.Fatalf("listener options %+v", no)
	}
	var to transport.Options
	k.Client(&to)
	if to.TLS == nil || to.Credentials == nil {
		t.Fatalf("transport options %+v", to)
	}
	if err := os.Chmod(creds, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Build(nil); err == nil {
		t.Fatal("a credentials file others may read was taken")
	}
	t.Setenv(EnvCredentials, "app:env-secret-0000")
	o2 := Options{}
	if err := o2.FromEnvironment(os.Getenv); err != nil || o2.Credentials.Name != "app" {
		t.Fatalf("from environment: %+v %v", o2.Credentials, err)
	}
}

func TestKit_Authorize(t *testing.T) {
	h := func(secret string) *auth.SecretHash {
		x, err := auth.HashSecret(secret)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	p, err := auth.NewPolicy(1, []auth.Entry{
		{Name: "ops", Kind: auth.KindAdmin, Secret: h("ops-secret-000000"), Grants: auth.Grants{Admin: auth.AdminWrite}},
		{Name: "viewer", Kind: auth.KindAdmin, Secret: h("viewer-secret-000"), Grants: auth.Grants{Admin: auth.AdminRead}},
		{Name: "app", Kind: auth.KindApp, Secret: h("app-secret-000000")},
	})
	if err != nil {
		t.Fatal(err)
	}
	a := auth.NewAuthority(p)
	req := func(header string) *http.Request {
		r, _ := http.NewRequest(http.MethodPut, "http://x/loglevel", nil)
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		return r
	}
	secured := (&Kit{opts: Options{RequireAuth: true}}).Authorize(a)
	for _, c := range []struct {
		header    string
		write     bool
		ok        bool
		forbidden bool
	}{
		{"", false, false, false},
		{"Bearer ops:wrong-secret-0000", true, false, false},
		{"Bearer ops:ops-secret-000000", true, true, false},
		{"Bearer viewer:viewer-secret-000", false, true, false},
		{"Bearer viewer:viewer-secret-000", true, false, true},
		{"Bearer app:app-secret-000000", false, false, true},
	} {
		err := secured(req(c.header), c.write)
		if c.ok != (err == nil) || c.forbidden != errors.Is(err, protocol.ErrForbidden) {
			t.Errorf("%q write=%v: %v", c.header, c.write, err)
		}
	}
	open := (&Kit{}).Authorize(a)
	if err := open(req(""), true); err != nil {
		t.Fatalf("an open broker refused an anonymous request: %v", err)
	}
	if err := (&Kit{ServerTLS: &tls.Config{}}).Authorize(nil)(req(""), false); err == nil {
		t.Fatal("a TLS broker without a policy let an anonymous request through")
	}
}

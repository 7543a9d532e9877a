package metaserver

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/devetcd"
	"github.com/qmq-go/qmq/pkg/exposure"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/pkg/transport"
)

// A meta server on TLS everywhere: etcd with client-certificate auth, TLS
// on the TCP and HTTP ports, identities from client certificates.
func TestTLS_EveryPortAndCertificateIdentities(t *testing.T) {
	ca := testutil.NewCA(t)
	node := ca.Issue(t, testutil.CertOptions{Name: "node", Hosts: []string{"127.0.0.1", "localhost"}, Both: true,
		URIs: []string{"qmq://admin/meta"}})
	files := tlsconfig.Files{CA: ca.CAFile, Cert: node.CertFile, Key: node.KeyFile}
	e, err := devetcd.Start(devetcd.Options{Dir: t.TempDir(), Fast: true,
		ClientTLS: devetcd.TLS{CertFile: node.CertFile, KeyFile: node.KeyFile, TrustedCAFile: ca.CAFile, ClientCertAuth: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	s := startServer(t, e.Endpoints(), func(o *Options) {
		o.TLS, o.EtcdTLS, o.RequireAuth = files, files, true
	})

	call := func(cfg *tls.Config, cmd protocol.Command, body []byte) error {
		tr, err := transport.New(transport.Options{TLS: cfg, RequestTimeout: 3 * time.Second, DialTimeout: 2 * time.Second}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		_, err = tr.Call(context.Background(), s.Addr().String(), cmd, body)
		return err
	}
	lookup := protocol.AppendLookupRequest(nil, &protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "tls.subject"})
	broker := ca.Issue(t, testutil.CertOptions{Name: "rt1", Client: true, URIs: []string{"qmq://broker/rt1"}})
	app := ca.Issue(t, testutil.CertOptions{Name: "app", Client: true, URIs: []string{"qmq://app/billing"}})
	reg := func(group string) []byte {
		r := master(group, "127.0.0.1:1")
		return protocol.AppendRegisterRequest(nil, &r)
	}

	if err := call(ca.ClientConfig(&broker), protocol.CmdRegister, reg("rt1")); err != nil {
		t.Fatalf("a broker certificate of rt1 registering rt1: %v", err)
	}
	if err := call(ca.ClientConfig(&broker), protocol.CmdRegister, reg("rt2")); !errors.Is(err, protocol.ErrForbidden) {
		t.Fatalf("a broker certificate of rt1 registering rt2: %v, want forbidden", err)
	}
	if err := call(ca.ClientConfig(&app), protocol.CmdRegister, reg("rt1")); !errors.Is(err, protocol.ErrForbidden) {
		t.Fatalf("an app certificate registering a broker: %v, want forbidden", err)
	}
	// The app certificate names an identity with no policy entry: no
	// grants, so it may not give the subject its first route; once a
	// broker did, it may look the route up.
	if err := call(ca.ClientConfig(&app), protocol.CmdLookup, lookup); !errors.Is(err, protocol.ErrForbidden) {
		t.Fatalf("first-route lookup by an app certificate without grants: %v, want forbidden", err)
	}
	if err := call(ca.ClientConfig(&broker), protocol.CmdLookup, lookup); err != nil {
		t.Fatalf("lookup by a broker certificate: %v", err)
	}
	if err := call(ca.ClientConfig(&app), protocol.CmdLookup, lookup); err != nil {
		t.Fatalf("lookup by an app certificate: %v", err)
	}
	if err := call(ca.ClientConfig(nil), protocol.CmdLookup, lookup); !errors.Is(err, protocol.ErrUnauthenticated) {
		t.Fatalf("lookup over TLS without an identity: %v, want unauthenticated", err)
	}
	if err := call(nil, protocol.CmdLookup, lookup); err == nil {
		t.Fatal("a plaintext client was served on the TLS port")
	}
	if err := call(testutil.NewCA(t).ClientConfig(nil), protocol.CmdLookup, lookup); err == nil {
		t.Fatal("a client trusting another CA was served")
	}

	get := func(cfg *tls.Config, url string) (int, error) {
		c := http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		resp, err := c.Get(url)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get(ca.ClientConfig(nil), "https://"+s.HTTPAddr().String()+"/healthz"); err != nil || code != 200 {
		t.Fatalf("https healthz: %d %v", code, err)
	}
	if code, err := get(nil, "http://"+s.HTTPAddr().String()+"/healthz"); err == nil && code == 200 {
		t.Fatal("plaintext HTTP served on the TLS port")
	}
}

func TestOptions_RefuseAnExposedListenerWithoutTLSAndAuth(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*Options)
		ok   bool
	}{
		{"loopback", func(o *Options) {}, true},
		{"all interfaces, plaintext", func(o *Options) { o.Addr = "0.0.0.0:0" }, false},
		{"all interfaces http, plaintext", func(o *Options) { o.HTTPAddr = ":0" }, false},
		{"all interfaces, TLS without auth", func(o *Options) {
			o.Addr, o.TLS = "0.0.0.0:0", tlsconfig.Files{Cert: "c.pem", Key: "k.pem"}
		}, false},
		{"all interfaces, TLS and auth", func(o *Options) {
			o.Addr, o.HTTPAddr, o.TLS, o.RequireAuth = "0.0.0.0:0", "0.0.0.0:0", tlsconfig.Files{Cert: "c.pem", Key: "k.pem"}, true
			o.AdvertiseAddr = "10.0.0.5:20880"
		}, true},
		{"all interfaces, --insecure", func(o *Options) { o.Addr, o.Insecure, o.AdvertiseAddr = "0.0.0.0:0", true, "10.0.0.5:20880" }, true},
	} {
		o := NewOptions()
		o.Addr, o.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
		c.mod(&o)
		err := o.Validate()
		if c.ok && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if !c.ok && !errors.Is(err, exposure.ErrInsecureListener) {
			t.Errorf("%s: %v, want ErrInsecureListener", c.name, err)
		}
	}
}

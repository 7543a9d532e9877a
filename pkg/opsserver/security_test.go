package opsserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/exposure"
	"github.com/qmq-go/qmq/pkg/protocol"
)

func TestServer_InsecureListener(t *testing.T) {
	authorize := func(*http.Request, bool) error { return nil }
	for _, tc := range []struct {
		name    string
		opts    Options
		refused bool
	}{
		{"all interfaces, nothing", Options{Addr: ":0"}, true},
		{"all interfaces, TLS only", Options{Addr: "0.0.0.0:0", TLS: &tls.Config{}}, true},
		{"all interfaces, Authorize only", Options{Addr: "0.0.0.0:0", Authorize: authorize}, true},
		{"all interfaces, insecure", Options{Addr: "0.0.0.0:0", Insecure: true}, false},
		{"loopback, nothing", Options{Addr: "127.0.0.1:0"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(tc.opts, nil)
			err := s.Start()
			if err == nil {
				defer s.Close(t.Context())
			}
			if tc.refused != errors.Is(err, exposure.ErrInsecureListener) {
				t.Fatalf("Start() = %v", err)
			}
			if tc.refused && !strings.Contains(err.Error(), tc.opts.Addr) {
				t.Fatalf("%v does not name the address", err)
			}
		})
	}
}

func TestServer_AuthorizeGuardsLogLevelAndPprof(t *testing.T) {
	lvl := zap.NewAtomicLevel()
	var asked []string
	s := New(Options{Level: &lvl, Authorize: func(r *http.Request, write bool) error {
		asked = append(asked, fmt.Sprintf("%s %s %v", r.Method, r.URL.Path, write))
		switch r.Header.Get("Authorization") {
		case "Bearer admin":
			return nil
		case "Bearer viewer":
			if !write {
				return nil
			}
			return fmt.Errorf("viewer may not change the level: %w", protocol.ErrForbidden)
		}
		return errors.New("no credential")
	}}, nil)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(t.Context()) })
	base := "http://" + s.Addr().String()
	do := func(method, path, token, body string) int {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		method, path, token string
		want                int
	}{
		{"GET", "/metrics", "", 200},
		{"GET", "/healthz", "", 200},
		{"GET", "/readyz", "", 200},
		{"GET", "/loglevel", "", 200},
		{"PUT", "/loglevel", "", 401},
		{"PUT", "/loglevel", "viewer", 403},
		{"GET", "/debug/pprof/", "", 401},
		{"GET", "/debug/pprof/", "viewer", 200},
		{"GET", "/debug/pprof/cmdline", "", 401},
		{"PUT", "/loglevel", "admin", 200},
	} {
		body := ""
		if tc.method == "PUT" {
			body = `{"level":"debug"}`
		}
		if got := do(tc.method, tc.path, tc.token, body); got != tc.want {
			t.Errorf("%s %s (%q) = %d, want %d", tc.method, tc.path, tc.token, got, tc.want)
		}
		if tc.method == "PUT" && tc.want != 200 && lvl.Level() == zap.DebugLevel {
			t.Fatalf("a refused PUT changed the level")
		}
	}
	if lvl.Level() != zap.DebugLevel {
		t.Fatal("the admin's PUT did not change the level")
	}
	if len(asked) != 6 || !strings.Contains(strings.Join(asked, ";"), "PUT /loglevel true") {
		t.Fatalf("Authorize asked %v", asked)
	}
}

func TestServer_TLS(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ops"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	s := New(Options{TLS: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}}, nil)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(t.Context()) })
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Get("https://" + s.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz over TLS %d", resp.StatusCode)
	}
	if resp, err := http.Get("http://" + s.Addr().String() + "/healthz"); err == nil && resp.StatusCode == 200 {
		t.Fatal("plain HTTP served on a TLS port")
	}
}

package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/tlsconfig/pki"

	"github.com/qmq-go/qmq/pkg/testutil"
)

// testPKI writes a CA and certificates under a temporary directory.
type testPKI struct {
	t   *testing.T
	dir string
	ca  *pki.CA
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := pki.NewCA("test CA", 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{t: t, dir: t.TempDir(), ca: ca}
	p.write("ca.pem", ca.CertPEM, 0o644)
	return p
}

func (p *testPKI) path(name string) string { return filepath.Join(p.dir, name) }

func (p *testPKI) write(name string, data []byte, perm os.FileMode) {
	p.t.Helper()
	if err := pki.WriteFile(p.path(name), data, perm); err != nil {
		p.t.Fatal(err)
	}
}

// issue writes name.pem and name-key.pem for l, signed by ca (p.ca when
// nil), and returns their files with p's CA file.
func (p *testPKI) issue(ca *pki.CA, name string, l pki.Leaf) Files {
	p.t.Helper()
	if ca == nil {
		ca = p.ca
	}
	cert, key, err := ca.Issue(l)
	if err != nil {
		p.t.Fatal(err)
	}
	p.write(name+"-key.pem", key, 0o600)
	p.write(name+".pem", cert, 0o644)
	return Files{CA: p.path("ca.pem"), Cert: p.path(name + ".pem"), Key: p.path(name + "-key.pem")}
}

func serverLeaf(name string) pki.Leaf {
	return pki.Leaf{Name: name, Hosts: []string{"127.0.0.1", "localhost"}, Server: true}
}

func clientLeaf(name string) pki.Leaf {
	return pki.Leaf{Identity: &url.URL{Scheme: "qmq", Host: "app", Path: "/" + name}, Client: true}
}

// handshake connects a client with cc to a server with sc over loopback
// TCP and returns both sides' states, or the first side's error.
func handshake(t *testing.T, sc, cc *tls.Config) (server, client tls.ConnectionState, err error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type side struct {
		state tls.ConnectionState
		err   error
	}
	accepted := make(chan side, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			accepted <- side{err: err}
			return
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
		srv := tls.Server(nc, sc)
		err = srv.Handshake()
		accepted <- side{state: srv.ConnectionState(), err: err}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	cli := tls.Client(nc, cc)
	cerr := cli.Handshake()
	if cerr != nil {
		nc.Close() // the server is not left waiting
	}
	srv := <-accepted
	if cerr != nil {
		return server, client, cerr
	}
	if srv.err != nil {
		return server, client, srv.err
	}
	return srv.state, cli.ConnectionState(), nil
}

func mustServer(t *testing.T, f Files, require bool, opts ...Option) *tls.Config {
	t.Helper()
	c, err := Server(f, require, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustClient(t *testing.T, f Files, name string, opts ...Option) *tls.Config {
	t.Helper()
	c, err := Client(f, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConfig_RoundTrip_ClientCertificate(t *testing.T) {
	p := newTestPKI(t)
	sc := mustServer(t, p.issue(nil, "server", serverLeaf("s1")), false)
	cc := mustClient(t, p.issue(nil, "app", clientLeaf("demo")), "127.0.0.1")
	ss, cs, err := handshake(t, sc, cc)
	if err != nil {
		t.Fatal(err)
	}
	if cs.Version != tls.VersionTLS13 {
		t.Errorf("version %x, want TLS 1.3", cs.Version)
	}
	if len(ss.VerifiedChains) == 0 || ss.VerifiedChains[0][0].URIs[0].String() != "qmq://app/demo" {
		t.Fatalf("server did not verify the client certificate: %+v", ss.VerifiedChains)
	}
	if cs.PeerCertificates[0].Subject.CommonName != "s1" {
		t.Fatalf("client saw %q", cs.PeerCertificates[0].Subject.CommonName)
	}
}

func TestConfig_RoundTrip_NoClientCertificate(t *testing.T) {
	p := newTestPKI(t)
	sc := mustServer(t, p.issue(nil, "server", serverLeaf("s1")), false)
	cc := mustClient(t, Files{CA: p.path("ca.pem")}, "localhost")
	ss, _, err := handshake(t, sc, cc)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss.PeerCertificates) != 0 {
		t.Fatal("a client certificate appeared")
	}
	// Required: the same client is refused.
	sc = mustServer(t, Files{CA: p.path("ca.pem"), Cert: p.path("server.pem"), Key: p.path("server-key.pem")}, true)
	if _, _, err := handshake(t, sc, cc); err == nil {
		t.Fatal("a server requiring client certificates took a client without one")
	}
}

func TestConfig_TLS12Minimum(t *testing.T) {
	p := newTestPKI(t)
	sc := mustServer(t, p.issue(nil, "server", serverLeaf("s1")), false)
	cc := mustClient(t, Files{CA: p.path("ca.pem")}, "127.0.0.1")
	old := cc.Clone()
	old.MaxVersion = tls.VersionTLS11
	old.MinVersion = tls.VersionTLS10
	if _, _, err := handshake(t, sc, old); err == nil {
		t.Fatal("TLS 1.1 was accepted")
	}
	v12 := cc.Clone()
	v12.MaxVersion = tls.VersionTLS12
	if _, cs, err := handshake(t, sc, v12); err != nil || cs.Version != tls.VersionTLS12 {
		t.Fatalf("TLS 1.2: %x, %v", cs.Version, err)
	}
}

func TestConfig_WrongCA(t *testing.T) {
	p := newTestPKI(t)
	other, err := pki.NewCA("other CA", 0)
	if err != nil {
		t.Fatal(err)
	}
	// A server whose certificate another CA signed.
	sc := mustServer(t, p.issue(other, "rogue", serverLeaf("rogue")), false)
	cc := mustClient(t, Files{CA: p.path("ca.pem")}, "127.0.0.1")
	_, _, err = handshake(t, sc, cc)
	var ve *tls.CertificateVerificationError
	if !errors.As(err, &ve) {
		t.Fatalf("handshake with a server of another CA: %v", err)
	}
	// A client certificate another CA signed, to a server that verifies.
	sc = mustServer(t, p.issue(nil, "server", serverLeaf("s1")), false)
	cc = mustClient(t, p.issue(other, "rogue-app", clientLeaf("demo")), "127.0.0.1")
	if _, _, err := handshake(t, sc, cc); err == nil {
		t.Fatal("a client certificate of another CA was accepted")
	}
}

func TestConfig_ExpiredCertificates(t *testing.T) {
	p := newTestPKI(t)
	expired := func(l pki.Leaf) pki.Leaf {
		l.NotBefore, l.ValidFor = time.Now().Add(-48*time.Hour), 24*time.Hour
		return l
	}
	sc := mustServer(t, p.issue(nil, "old", expired(serverLeaf("old"))), false)
	cc := mustClient(t, Files{CA: p.path("ca.pem")}, "127.0.0.1")
	if _, _, err := handshake(t, sc, cc); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired server certificate: %v", err)
	}
	sc = mustServer(t, p.issue(nil, "server", serverLeaf("s1")), false)
	cc = mustClient(t, p.issue(nil, "old-app", expired(clientLeaf("demo"))), "127.0.0.1")
	if _, _, err := handshake(t, sc, cc); err == nil {
		t.Fatal("an expired client certificate was accepted")
	}
}

func TestConfig_ServerName(t *testing.T) {
	p := newTestPKI(t)
	sc := mustServer(t, p.issue(nil, "server", serverLeaf("s1")), false)
	ca := Files{CA: p.path("ca.pem")}
	if _, _, err := handshake(t, sc, mustClient(t, ca, "elsewhere.example")); err == nil {
		t.Fatal("a certificate for 127.0.0.1 and localhost was taken for elsewhere.example")
	}
	// The name of the connection, as net/http and pkg/transport set it.
	cc := mustClient(t, ca, "")
	named := cc.Clone()
	named.ServerName = "localhost"
	if _, _, err := handshake(t, sc, named); err != nil {
		t.Fatal(err)
	}
	// An IP address leaves the state's name empty: refused, not skipped.
	ip := cc.Clone()
	ip.ServerName = "127.0.0.1"
	if _, _, err := handshake(t, sc, ip); !errors.Is(err, errNoServerName) {
		t.Fatalf("IP address without a name: %v", err)
	}
	// A client certificate is no server certificate.
	sc = mustServer(t, p.issue(nil, "client-as-server",
		pki.Leaf{Hosts: []string{"127.0.0.1"}, Identity: &url.URL{Scheme: "qmq", Host: "app", Path: "/x"}, Client: true}), false)
	if _, _, err := handshake(t, sc, mustClient(t, ca, "127.0.0.1")); err == nil {
		t.Fatal("a client-only certificate served as a server's")
	}
}

func TestFiles_Validate(t *testing.T) {
	p := newTestPKI(t)
	if _, err := Server(Files{Cert: "x.pem"}, false); !errors.Is(err, ErrInvalid) {
		t.Errorf("cert without key: %v", err)
	}
	if _, err := Server(Files{CA: p.path("ca.pem")}, false); !errors.Is(err, ErrInvalid) {
		t.Errorf("server without cert: %v", err)
	}
	f := p.issue(nil, "server", serverLeaf("s1"))
	if _, err := Server(Files{Cert: f.Cert, Key: f.Key}, true); !errors.Is(err, ErrInvalid) {
		t.Errorf("required client certificates without a CA: %v", err)
	}
	if _, err := Client(Files{CA: p.path("missing.pem")}, ""); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing CA: %v", err)
	}
	p.write("junk.pem", []byte("not pem"), 0o644)
	if _, err := Client(Files{CA: p.path("junk.pem")}, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("CA without certificates: %v", err)
	}
	if err := os.Chmod(f.Key, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Server(f, false); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("key readable by others: %v", err)
	}
	if !(Files{}).IsZero() || f.IsZero() {
		t.Error("IsZero")
	}
	c, err := Client(Files{}, "")
	if err != nil || c.InsecureSkipVerify || c.MinVersion != tls.VersionTLS12 {
		t.Errorf("no files: system roots expected: %+v, %v", c, err)
	}
}

func TestFiles_AddFlags(t *testing.T) {
	var f Files
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	f.AddFlags(fs, "tls-", "this server's")
	if err := fs.Parse([]string{"--tls-ca", "a", "--tls-cert=b", "-tls-key", "c"}); err != nil {
		t.Fatal(err)
	}
	if f != (Files{CA: "a", Cert: "b", Key: "c"}) {
		t.Fatalf("%+v", f)
	}
}

// leafCN returns the common name of the certificate the client saw.
func leafCN(t *testing.T, sc, cc *tls.Config) string {
	t.Helper()
	_, cs, err := handshake(t, sc, cc)
	if err != nil {
		t.Fatal(err)
	}
	return cs.PeerCertificates[0].Subject.CommonName
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, what, cond)
}

func TestReload_ServerCertificate(t *testing.T) {
	p := newTestPKI(t)
	var mu sync.Mutex
	var reloadErrs []error
	onErr := OnReloadError(func(err error) { mu.Lock(); reloadErrs = append(reloadErrs, err); mu.Unlock() })
	sc := mustServer(t, p.issue(nil, "server", serverLeaf("first")), false, onErr, withCheckInterval(10*time.Millisecond))
	cc := mustClient(t, Files{CA: p.path("ca.pem")}, "127.0.0.1")
	if cn := leafCN(t, sc, cc); cn != "first" {
		t.Fatalf("first handshake saw %q", cn)
	}
	p.issue(nil, "server", serverLeaf("second")) // key first, then the certificate
	waitFor(t, "the new certificate", func() bool { return leafCN(t, sc, cc) == "second" })

	// A broken certificate keeps the old one in use, and is told once.
	p.write("server.pem", []byte("-----BEGIN CERTIFICATE-----\nbroken\n"), 0o644)
	time.Sleep(30 * time.Millisecond) // several check intervals
	for range 5 {
		if cn := leafCN(t, sc, cc); cn != "second" {
			t.Fatalf("after a broken file the server presented %q", cn)
		}
		time.Sleep(15 * time.Millisecond)
	}
	mu.Lock()
	n := len(reloadErrs)
	mu.Unlock()
	if n != 1 {
		t.Fatalf("%d reload errors told, want 1: %v", n, reloadErrs)
	}
	// A certificate whose key is not the key file's: also kept out.
	other, _, err := p.ca.Issue(serverLeaf("mismatch"))
	if err != nil {
		t.Fatal(err)
	}
	p.write("server.pem", other, 0o644)
	waitFor(t, "the mismatch told", func() bool {
		leafCN(t, sc, cc) // files are checked from handshakes
		mu.Lock()
		defer mu.Unlock()
		return len(reloadErrs) == 2
	})
	if cn := leafCN(t, sc, cc); cn != "second" {
		t.Fatalf("after a mismatched key the server presented %q", cn)
	}
	// Fixed: the next good pair is used.
	p.issue(nil, "server", serverLeaf("third"))
	waitFor(t, "the third certificate", func() bool { return leafCN(t, sc, cc) == "third" })
}

func TestReload_CheckedAtMostOncePerInterval(t *testing.T) {
	p := newTestPKI(t)
	sc := mustServer(t, p.issue(nil, "server", serverLeaf("first")), false) // the default interval: 1 s
	cc := mustClient(t, Files{CA: p.path("ca.pem")}, "127.0.0.1")
	start := time.Now()
	p.issue(nil, "server", serverLeaf("second"))
	cn := leafCN(t, sc, cc)
	if time.Since(start) < checkInterval/2 && cn != "first" {
		t.Fatalf("the files were read again %v after the last check", time.Since(start))
	}
	waitFor(t, "the new certificate after a second", func() bool { return leafCN(t, sc, cc) == "second" })
}

func TestReload_ClientCAAndCertificate(t *testing.T) {
	p := newTestPKI(t)
	sf := p.issue(nil, "server", serverLeaf("old-ca-server"))
	sc := mustServer(t, sf, false, withCheckInterval(10*time.Millisecond))
	cf := p.issue(nil, "app", clientLeaf("first"))
	cc := mustClient(t, cf, "127.0.0.1", withCheckInterval(10*time.Millisecond))
	clientID := func() string {
		ss, _, err := handshake(t, sc, cc)
		if err != nil {
			t.Fatal(err)
		}
		return ss.PeerCertificates[0].URIs[0].String()
	}
	if id := clientID(); id != "qmq://app/first" {
		t.Fatalf("client presented %s", id)
	}
	p.issue(nil, "app", clientLeaf("second"))
	waitFor(t, "the client's new certificate", func() bool { return clientID() == "qmq://app/second" })

	// The CA is rotated: the bundle holds the old and the new CA, the
	// server gets a certificate of the new one, and the same client
	// config (and server config) follow.
	newCA, err := pki.NewCA("new CA", 0)
	if err != nil {
		t.Fatal(err)
	}
	p.write("ca.pem", append(append([]byte(nil), p.ca.CertPEM...), newCA.CertPEM...), 0o644)
	p.issue(newCA, "server", serverLeaf("new-ca-server"))
	waitFor(t, "the new CA's server", func() bool {
		_, cs, err := handshake(t, sc, cc)
		return err == nil && cs.PeerCertificates[0].Subject.CommonName == "new-ca-server"
	})
	// Only the new CA: a server still on the old CA is refused.
	p.write("ca.pem", newCA.CertPEM, 0o644)
	p.issue(newCA, "app", clientLeaf("third"))
	oldServer := mustServer(t, p.issue(p.ca, "rogue", serverLeaf("rogue")), false)
	waitFor(t, "the old CA dropped", func() bool {
		_, _, err := handshake(t, oldServer, cc)
		return err != nil
	})
}

func TestReload_VerifiesPool(t *testing.T) {
	// The pool read last is the one VerifyConnection uses: checked
	// directly, without a handshake.
	p := newTestPKI(t)
	s, err := newSource(Files{CA: p.path("ca.pem")}, nil, []Option{withCheckInterval(time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := p.ca.Issue(serverLeaf("x"))
	if err != nil {
		t.Fatal(err)
	}
	p.write("x.pem", certPEM, 0o644)
	cert, _, err := pki.ReadCertificate(p.path("x.pem"))
	if err != nil {
		t.Fatal(err)
	}
	state := tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}, ServerName: "localhost"}
	if err := verifyServer(s.get().pool, "", state); err != nil {
		t.Fatal(err)
	}
	other, _ := pki.NewCA("other", 0)
	p.write("ca.pem", other.CertPEM, 0o644)
	waitFor(t, "the new pool", func() bool { return verifyServer(s.get().pool, "", state) != nil })
}

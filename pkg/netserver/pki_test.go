package netserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
)

// testCA is a certificate authority made for the tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

var (
	pkiOnce         sync.Once
	pkiCA, pkiOther *testCA // the servers' CA, and a CA nobody trusts
	pkiServer       tls.Certificate
)

// testPKI makes (once) the tests' CAs and the server's certificate, for
// 127.0.0.1.
func testPKI(t testing.TB) {
	t.Helper()
	pkiOnce.Do(func() {
		pkiCA, pkiOther = newTestCA(t, "qmq test CA"), newTestCA(t, "qmq other CA")
		pkiServer = pkiCA.issue(t, certSpec{ips: []net.IP{net.IPv4(127, 0, 0, 1)}, server: true})
	})
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// certSpec describes a certificate to issue.
type certSpec struct {
	ips      []net.IP
	uris     []*url.URL
	server   bool
	notAfter time.Time // zero: a day from now
}

var serial sync.Mutex
var nextSerial int64 = 100

func (ca *testCA) issue(t testing.TB, spec certSpec) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial.Lock()
	nextSerial++
	sn := nextSerial
	serial.Unlock()
	notAfter := spec.notAfter
	if notAfter.IsZero() {
		notAfter = time.Now().Add(24 * time.Hour)
	}
	usage := x509.ExtKeyUsageClientAuth
	if spec.server {
		usage = x509.ExtKeyUsageServerAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(sn), Subject: pkix.Name{CommonName: "qmq test"},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: spec.ips, URIs: spec.uris,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// clientCert issues a client certificate naming identity (kind, name) by
// the servers' CA.
func clientCert(t testing.TB, kind auth.Kind, name string) tls.Certificate {
	testPKI(t)
	return pkiCA.issue(t, certSpec{uris: []*url.URL{auth.IdentityURI(kind, name)}})
}

// serverTLS returns a server config: the server's certificate, and client
// certificates verified (when given) against the servers' CA.
func serverTLS(t testing.TB) *tls.Config {
	testPKI(t)
	return &tls.Config{Certificates: []tls.Certificate{pkiServer}, ClientCAs: pkiCA.pool,
		ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}
}

// clientTLS returns a client config trusting the servers' CA, presenting
// certs.
func clientTLS(t testing.TB, certs ...tls.Certificate) *tls.Config {
	testPKI(t)
	return &tls.Config{RootCAs: pkiCA.pool, Certificates: certs, MinVersion: tls.VersionTLS12}
}

// withTLS is a startServer hook that serves with TLS (serverTLS).
func withTLS(t testing.TB) func(*Server) {
	cfg := serverTLS(t)
	return func(s *Server) { s.opts.TLS = cfg }
}

// tlsMode, while set, makes startServer serve every test server with TLS
// and dial connect with TLS (useTLS), so a test written for the plaintext
// path runs on the TLS path unchanged.
var tlsMode bool

// useTLS serves the rest of the test over TLS.
func useTLS(t *testing.T) {
	tlsMode = true
	t.Cleanup(func() { tlsMode = false })
}

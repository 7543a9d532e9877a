package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority for tests: it signs server and client
// certificates and writes them as PEM files (keys 0600) in a directory.
type CA struct {
	Dir    string // where the files are
	CAFile string // the CA certificate, PEM
	Cert   *x509.Certificate
	Pool   *x509.CertPool
	key    *ecdsa.PrivateKey
	serial int64
}

// Issued is a certificate the CA signed, as files and as a tls.Certificate.
type Issued struct {
	CertFile, KeyFile string
	TLS               tls.Certificate
}

// NewCA makes a CA in a temporary directory of t.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "qmq test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Dir: t.TempDir(), Cert: cert, Pool: x509.NewCertPool(), key: key, serial: 1}
	ca.Pool.AddCert(cert)
	ca.CAFile = filepath.Join(ca.Dir, "ca.pem")
	writePEM(t, ca.CAFile, "CERTIFICATE", der, 0o644)
	return ca
}

// CertOptions shape one certificate.
type CertOptions struct {
	Name      string    // file name stem and common name
	Hosts     []string  // DNS names and IP addresses (server certificates)
	URIs      []string  // URI SANs, such as qmq://app/billing (client identities)
	NotBefore time.Time // default an hour ago
	NotAfter  time.Time // default a day ahead
	Client    bool      // for client authentication (default: server)
	Both      bool      // for server and client authentication (a node's)
}

// Issue signs a certificate and writes NAME.pem and NAME-key.pem.
func (ca *CA) Issue(t testing.TB, o CertOptions) Issued {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.serial++
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial),
		Subject:      pkix.Name{CommonName: o.Name},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	switch {
	case o.Both:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	case o.Client:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	for _, h := range o.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	for _, s := range o.URIs {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	is := Issued{CertFile: filepath.Join(ca.Dir, o.Name+".pem"), KeyFile: filepath.Join(ca.Dir, o.Name+"-key.pem")}
	writePEM(t, is.CertFile, "CERTIFICATE", der, 0o644)
	writePEM(t, is.KeyFile, "EC PRIVATE KEY", keyDER, 0o600)
	is.TLS, err = tls.LoadX509KeyPair(is.CertFile, is.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return is
}

// ServerConfig is a TLS server configuration with cert that verifies client
// certificates against the CA when a client sends one.
func (ca *CA) ServerConfig(cert Issued) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{cert.TLS}, ClientCAs: ca.Pool,
		ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}
}

// ClientConfig is a TLS client configuration trusting the CA, presenting
// cert when given.
func (ca *CA) ClientConfig(cert *Issued) *tls.Config {
	c := &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		c.Certificates = []tls.Certificate{cert.TLS}
	}
	return c
}

func writePEM(t testing.TB, path, kind string, der []byte, mode os.FileMode) {
	t.Helper()
	b := pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatal(err)
	}
}

// Package pki makes a small certificate authority and the certificates a
// QMQ-Go cluster uses: server certificates for host names and IP
// addresses, and client certificates that name an identity in a URI SAN
// (qmq://<kind>/<name>, see pkg/auth). scripts/certs is its command; tests
// use it for throw-away CAs. Keys are ECDSA P-256, written PKCS #8.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// Defaults of validity.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultLeafValidity = 365 * 24 * time.Hour
	// backdate is how long before now a certificate becomes valid, so a
	// peer whose clock is a little behind accepts it.
	backdate = 5 * time.Minute
)

// ErrNoPEM: a file holds no PEM block of the type expected.
var ErrNoPEM = errors.New("pki: no PEM block")

// CA is a certificate authority: its certificate and its signing key.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	Key     crypto.Signer
	KeyPEM  []byte
}

// NewCA makes a self-signed CA named name, valid for validFor (0:
// DefaultCAValidity).
func NewCA(name string, validFor time.Duration) (*CA, error) {
	if validFor <= 0 {
		validFor = DefaultCAValidity
	}
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, CertPEM: encode("CERTIFICATE", der), Key: key, KeyPEM: keyPEM}, nil
}

// LoadCA reads a CA's certificate and key from PEM files.
func LoadCA(certPath, keyPath string) (*CA, error) {
	cert, certPEM, err := ReadCertificate(certPath)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("pki: %s is not a CA certificate", certPath)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: %s: want a PRIVATE KEY", ErrNoPEM, keyPath)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", keyPath, err)
	}
	key, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("pki: %s: the key cannot sign", keyPath)
	}
	if !publicKeysEqual(key.Public(), cert.PublicKey) {
		return nil, fmt.Errorf("pki: %s is not the key of %s", keyPath, certPath)
	}
	return &CA{Cert: cert, CertPEM: certPEM, Key: key, KeyPEM: keyPEM}, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ea, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ea.Equal(b)
}

// Leaf describes a certificate to issue.
type Leaf struct {
	// Name is the subject's common name (informational: verification reads
	// the SANs). Default: the identity's URI, or the first of Hosts.
	Name string
	// Hosts are the DNS names and IP addresses a server answers as.
	Hosts []string
	// Identity is the URI SAN naming who the holder is (qmq://app/demo,
	// auth.IdentityURI), or nil.
	Identity *url.URL
	// Server and Client say what the certificate may authenticate: a
	// server (extended key usage serverAuth), a client (clientAuth), or
	// both.
	Server, Client bool
	// NotBefore is when it becomes valid (zero: 5 minutes ago); it stays
	// valid for ValidFor (0: DefaultLeafValidity).
	NotBefore time.Time
	ValidFor  time.Duration
}

// Issue signs a new certificate for l with a new key and returns both in
// PEM.
func (ca *CA) Issue(l Leaf) (certPEM, keyPEM []byte, err error) {
	if !l.Server && !l.Client {
		return nil, nil, errors.New("pki: a certificate must be for a server, a client or both")
	}
	if l.Server && len(l.Hosts) == 0 {
		return nil, nil, errors.New("pki: a server certificate needs a host name or address")
	}
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	if l.NotBefore.IsZero() {
		l.NotBefore = time.Now().Add(-backdate)
	}
	if l.ValidFor <= 0 {
		l.ValidFor = DefaultLeafValidity
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: l.Name},
		NotBefore:    l.NotBefore,
		NotAfter:     l.NotBefore.Add(l.ValidFor),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	for _, h := range l.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if l.Identity != nil {
		tmpl.URIs = []*url.URL{l.Identity}
	}
	if tmpl.Subject.CommonName == "" {
		if l.Identity != nil {
			tmpl.Subject.CommonName = l.Identity.String()
		} else if len(l.Hosts) > 0 {
			tmpl.Subject.CommonName = l.Hosts[0]
		}
	}
	if l.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if l.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	return encode("CERTIFICATE", der), keyPEM, nil
}

// ReadCertificate reads the first certificate of a PEM file.
func ReadCertificate(path string) (*x509.Certificate, []byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("%w: %s: want a CERTIFICATE", ErrNoPEM, path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %s: %w", path, err)
	}
	return cert, b, nil
}

// WriteFile writes data to path with mode perm through a temporary file
// in the same directory, synced and renamed over path, so a reader (a
// server reloading its certificate) sees the old file or the new one,
// never half of one.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename it is gone: the error is ignored
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func newKey() (crypto.Signer, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return key, encode("PRIVATE KEY", der), nil
}

func encode(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// serial returns a random 128-bit serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n.Add(n, big.NewInt(1))
}

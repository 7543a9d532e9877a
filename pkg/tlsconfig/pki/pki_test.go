package pki

import (
	"crypto/x509"
	"net/url"
	"os"
	"path/filepath"
	"testing"
)

func TestCA_LoadAndIssue(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA("test", 0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("other", 0)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		path := filepath.Join(dir, name)
		if err := WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	certPath, keyPath := write("ca.pem", ca.CertPEM), write("ca-key.pem", ca.KeyPEM)
	loaded, err := LoadCA(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(certPath, write("other-key.pem", other.KeyPEM)); err == nil {
		t.Fatal("a CA loaded with another CA's key")
	}
	if fi, _ := os.Stat(keyPath); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %#o", fi.Mode().Perm())
	}

	id := &url.URL{Scheme: "qmq", Host: "broker", Path: "/rt1"}
	certPEM, _, err := loaded.Issue(Leaf{Hosts: []string{"127.0.0.1", "broker.test"}, Identity: id, Server: true, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	cert, _, err := ReadCertificate(write("leaf.pem", certPEM))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "broker.test", KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Fatal(err)
		}
	}
	if len(cert.IPAddresses) != 1 || cert.URIs[0].String() != "qmq://broker/rt1" || cert.Subject.CommonName != "qmq://broker/rt1" {
		t.Fatalf("SANs %v %v %v, CN %q", cert.IPAddresses, cert.DNSNames, cert.URIs, cert.Subject.CommonName)
	}
	if _, _, err := ca.Issue(Leaf{Server: true}); err == nil {
		t.Fatal("a server certificate without a host")
	}
	if _, _, err := ca.Issue(Leaf{Hosts: []string{"x"}}); err == nil {
		t.Fatal("a certificate for nothing")
	}
}

package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/pkg/tlsconfig/pki"
)

func runCerts(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := run(args, &out); err != nil {
		t.Fatalf("certs %v: %v", args, err)
	}
	return out.String()
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestCerts_OutputVerifies(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	runCerts(t, "-dir", dir, "-server", "127.0.0.1,localhost,qmq.test", "-client", "admin:admin", "-client", "app:demo",
		"-node", "broker:rt1")
	if m := mode(t, dir); m != 0o700 {
		t.Errorf("directory mode %#o", m)
	}
	for _, key := range []string{"ca-key.pem", "server-key.pem", "admin-admin-key.pem", "app-demo-key.pem", "broker-rt1-key.pem"} {
		if m := mode(t, filepath.Join(dir, key)); m != 0o600 {
			t.Errorf("%s mode %#o", key, m)
		}
	}
	ca, _, err := pki.ReadCertificate(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	verify := func(name string, usage x509.ExtKeyUsage, host string) *x509.Certificate {
		t.Helper()
		cert, _, err := pki.ReadCertificate(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Fatalf("%s for %v %q: %v", name, usage, host, err)
		}
		return cert
	}
	for _, host := range []string{"127.0.0.1", "localhost", "qmq.test"} {
		verify("server.pem", x509.ExtKeyUsageServerAuth, host)
		verify("broker-rt1.pem", x509.ExtKeyUsageServerAuth, host)
	}
	for name, want := range map[string]string{
		"admin-admin.pem": auth.IdentityURI(auth.KindAdmin, "admin").String(),
		"app-demo.pem":    auth.IdentityURI(auth.KindApp, "demo").String(),
		"broker-rt1.pem":  auth.IdentityURI(auth.KindBroker, "rt1").String(),
	} {
		cert := verify(name, x509.ExtKeyUsageClientAuth, "")
		kind, id, err := auth.CertificateIdentity(cert)
		if err != nil || len(cert.URIs) != 1 || cert.URIs[0].String() != want {
			t.Fatalf("%s names %v (%v %s, %v), want %s", name, cert.URIs, kind, id, err, want)
		}
	}
	// A client certificate is no server certificate.
	cert, _, _ := pki.ReadCertificate(filepath.Join(dir, "app-demo.pem"))
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Fatal("app-demo.pem verifies as a server certificate")
	}

	// The files work together: a TLS server on broker-rt1's certificate, a
	// client presenting app-demo's, both through pkg/tlsconfig.
	files := func(base string) tlsconfig.Files {
		return tlsconfig.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, base+".pem"), Key: filepath.Join(dir, base+"-key.pem")}
	}
	sc, err := tlsconfig.Server(files("broker-rt1"), true)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := tlsconfig.Client(files("app-demo"), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if got := handshake(t, sc, cc); got != "qmq://app/demo" {
		t.Fatalf("server saw %q", got)
	}
}

// handshake connects cc to sc over loopback and returns the URI of the
// client's certificate as the server verified it.
func handshake(t *testing.T, sc, cc *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
		srv := tls.Server(nc, sc)
		if err := srv.Handshake(); err != nil {
			got <- err.Error()
			return
		}
		got <- srv.ConnectionState().VerifiedChains[0][0].URIs[0].String()
	}()
	nc, err := tls.Dial("tcp", ln.Addr().String(), cc)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	return <-got
}

func TestCerts_Idempotent(t *testing.T) {
	dir := t.TempDir()
	args := []string{"-dir", dir, "-client", "app:demo"}
	runCerts(t, args...)
	caPEM := readFile(t, filepath.Join(dir, "ca.pem"))
	server := readFile(t, filepath.Join(dir, "server.pem"))
	app := readFile(t, filepath.Join(dir, "app-demo.pem"))

	out := runCerts(t, args...)
	if strings.Contains(out, "wrote") {
		t.Fatalf("a second run wrote files:\n%s", out)
	}
	if !bytes.Equal(caPEM, readFile(t, filepath.Join(dir, "ca.pem"))) || !bytes.Equal(app, readFile(t, filepath.Join(dir, "app-demo.pem"))) {
		t.Fatal("a second run changed the CA or a certificate")
	}
	// Other names: the server certificate is issued again, by the same CA.
	out = runCerts(t, "-dir", dir, "-server", "127.0.0.1,qmq.test", "-client", "app:demo")
	if !strings.Contains(out, "wrote  "+filepath.Join(dir, "server.pem")) || strings.Contains(out, "app-demo.pem  ") {
		t.Fatalf("changed names:\n%s", out)
	}
	if bytes.Equal(server, readFile(t, filepath.Join(dir, "server.pem"))) || !bytes.Equal(caPEM, readFile(t, filepath.Join(dir, "ca.pem"))) {
		t.Fatal("the server certificate was kept or the CA changed")
	}
	// -new-ca: a new CA and every certificate again.
	out = runCerts(t, "-dir", dir, "-client", "app:demo", "-new-ca")
	if bytes.Equal(caPEM, readFile(t, filepath.Join(dir, "ca.pem"))) || strings.Count(out, "wrote") != 3 {
		t.Fatalf("-new-ca:\n%s", out)
	}
	// A damaged certificate is issued again.
	if err := os.WriteFile(filepath.Join(dir, "app-demo.pem"), []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := runCerts(t, "-dir", dir, "-client", "app:demo"); !strings.Contains(out, "wrote  "+filepath.Join(dir, "app-demo.pem")) {
		t.Fatalf("damaged certificate kept:\n%s", out)
	}
}

func TestCerts_BadArguments(t *testing.T) {
	for _, args := range [][]string{
		{"-client", "nobody"},
		{"-client", "root:x"},
		{"-client", "app:bad name"},
		{"-client", "app:x", "-client", "app:x"},
		{"-node", "broker:rt1", "-server", ""},
		{"-days", "0"},
		{"stray"},
	} {
		if err := run(append([]string{"-dir", t.TempDir()}, args...), &bytes.Buffer{}); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	// Half a CA is refused rather than replaced.
	dir := t.TempDir()
	runCerts(t, "-dir", dir)
	if err := os.Remove(filepath.Join(dir, "ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"-dir", dir}, &bytes.Buffer{}); err == nil {
		t.Fatal("a CA without its key was replaced silently")
	}
}

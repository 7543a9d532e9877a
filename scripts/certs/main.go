// Command certs makes a local certificate authority and the certificates of
// a QMQ-Go cluster, for local use and tests (scripts/run-local.sh with
// QMQ_SECURE=1):
//
//	go run ./scripts/certs -dir data/tls -server 127.0.0.1,localhost \
//	    -node broker:rt1 -node broker:rt2 -node broker:dl1 \
//	    -client admin:admin -client app:demo
//
// It writes into -dir (created 0700):
//
//	ca.pem, ca-key.pem                 the CA (kept when it exists, unless -new-ca)
//	server.pem, server-key.pem         a server certificate for the -server names
//	<kind>-<name>.pem, ...-key.pem     per -client: a client certificate whose URI
//	                                   SAN is qmq://<kind>/<name>; per -node: the same,
//	                                   also valid as a server for the -server names, so
//	                                   one certificate serves a broker's listeners and
//	                                   proves its group to the meta server and its master
//
// Keys are written 0600, certificates 0644, each through a temporary file
// renamed into place. Running it again keeps every certificate that still
// matches what is asked (same CA, names, identity and usage, and more than
// a third of its validity left) and issues the others; -renew issues them
// all.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/config"
	"github.com/qmq-go/qmq/pkg/tlsconfig/pki"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "certs:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	dir     string
	hosts   []string
	clients []string
	nodes   []string
	days    int
	newCA   bool
	renew   bool
}

func parse(args []string) (options, error) {
	o := options{dir: "data/tls", hosts: []string{"127.0.0.1", "localhost"}, days: 365}
	fs := flag.NewFlagSet("certs", flag.ContinueOnError)
	fs.StringVar(&o.dir, "dir", o.dir, "directory of the CA and certificates (created 0700)")
	config.StringList(fs, &o.hosts, "server", "host names and IP addresses of the server certificates (comma-separated; empty: no server certificate)")
	config.StringList(fs, &o.clients, "client", "kind:name of a client certificate (kind app, broker or admin; repeated)")
	config.StringList(fs, &o.nodes, "node", "kind:name of a certificate that is a client identity and a server for the -server names (repeated)")
	fs.IntVar(&o.days, "days", o.days, "validity of the certificates issued, in days")
	fs.BoolVar(&o.newCA, "new-ca", false, "make a new CA even if one exists (every certificate is issued again)")
	fs.BoolVar(&o.renew, "renew", false, "issue every certificate again, even those still valid")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.days <= 0 {
		return o, fmt.Errorf("-days must be positive, got %d", o.days)
	}
	if len(o.nodes) > 0 && len(o.hosts) == 0 {
		return o, errors.New("-node needs -server names")
	}
	return o, nil
}

// leafFile is one certificate to have in the directory.
type leafFile struct {
	base string // file name without .pem
	leaf pki.Leaf
}

func run(args []string, out io.Writer) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	leaves, err := o.leaves()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(o.dir, 0o700); err != nil {
		return err
	}
	ca, fresh, err := o.loadOrMakeCA(out)
	if err != nil {
		return err
	}
	for _, lf := range leaves {
		if err := o.ensure(ca, lf, fresh || o.renew, out); err != nil {
			return err
		}
	}
	return nil
}

// leaves lists the certificates asked for.
func (o options) leaves() ([]leafFile, error) {
	validFor := time.Duration(o.days) * 24 * time.Hour
	var leaves []leafFile
	if len(o.hosts) > 0 {
		leaves = append(leaves, leafFile{base: "server", leaf: pki.Leaf{Hosts: o.hosts, Server: true, ValidFor: validFor}})
	}
	add := func(spec string, server bool) error {
		kindName, name, ok := strings.Cut(spec, ":")
		kind, err := auth.ParseKind(kindName)
		if !ok || err != nil {
			return fmt.Errorf("%q: want kind:name with kind app, broker or admin", spec)
		}
		if err := auth.ValidateName(name); err != nil {
			return fmt.Errorf("%q: %w", spec, err)
		}
		l := pki.Leaf{Identity: auth.IdentityURI(kind, name), Client: true, ValidFor: validFor}
		if server {
			l.Hosts, l.Server = o.hosts, true
		}
		base := kind.String() + "-" + name
		if slices.ContainsFunc(leaves, func(lf leafFile) bool { return lf.base == base }) {
			return fmt.Errorf("%q is asked for twice", spec)
		}
		leaves = append(leaves, leafFile{base: base, leaf: l})
		return nil
	}
	for _, spec := range o.clients {
		if err := add(spec, false); err != nil {
			return nil, err
		}
	}
	for _, spec := range o.nodes {
		if err := add(spec, true); err != nil {
			return nil, err
		}
	}
	return leaves, nil
}

func (o options) path(name string) string { return filepath.Join(o.dir, name) }

// loadOrMakeCA returns the directory's CA, making it when there is none or
// -new-ca asks; fresh reports a new CA.
func (o options) loadOrMakeCA(out io.Writer) (ca *pki.CA, fresh bool, err error) {
	certPath, keyPath := o.path("ca.pem"), o.path("ca-key.pem")
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	if !o.newCA && (certErr == nil || keyErr == nil) {
		if certErr != nil || keyErr != nil {
			return nil, false, fmt.Errorf("%s and %s must both exist (or use -new-ca)", certPath, keyPath)
		}
		ca, err := pki.LoadCA(certPath, keyPath)
		if err != nil {
			return nil, false, err
		}
		fmt.Fprintf(out, "kept   %s\n", certPath)
		return ca, false, nil
	}
	ca, err = pki.NewCA("QMQ-Go local CA", 10*365*24*time.Hour)
	if err != nil {
		return nil, false, err
	}
	if err := pki.WriteFile(keyPath, ca.KeyPEM, 0o600); err != nil {
		return nil, false, err
	}
	if err := pki.WriteFile(certPath, ca.CertPEM, 0o644); err != nil {
		return nil, false, err
	}
	fmt.Fprintf(out, "wrote  %s\n", certPath)
	return ca, true, nil
}

// ensure keeps lf's files when they hold a certificate that still serves,
// and issues it otherwise.
func (o options) ensure(ca *pki.CA, lf leafFile, reissue bool, out io.Writer) error {
	certPath, keyPath := o.path(lf.base+".pem"), o.path(lf.base+"-key.pem")
	if !reissue {
		if err := stillGood(ca, lf.leaf, certPath, keyPath); err == nil {
			fmt.Fprintf(out, "kept   %s\n", certPath)
			return nil
		}
	}
	certPEM, keyPEM, err := ca.Issue(lf.leaf)
	if err != nil {
		return err
	}
	// The key first: a server re-reading its files on a change then never
	// pairs the new certificate with the old key.
	if err := pki.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	if err := pki.WriteFile(certPath, certPEM, 0o644); err != nil {
		return err
	}
	what := "server " + strings.Join(lf.leaf.Hosts, ",")
	switch {
	case lf.leaf.Identity != nil && lf.leaf.Server:
		what = lf.leaf.Identity.String() + " (and " + what + ")"
	case lf.leaf.Identity != nil:
		what = lf.leaf.Identity.String()
	}
	fmt.Fprintf(out, "wrote  %s  %s\n", certPath, what)
	return nil
}

// stillGood reports why the certificate at certPath does not do what l
// asks, or nil when it does: its key is keyPath's, ca signed it, it names
// the same hosts and identity for the same usages, and more than a third
// of its validity is left.
func stillGood(ca *pki.CA, l pki.Leaf, certPath, keyPath string) error {
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return err
	}
	cert := pair.Leaf
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return err
	}
	if left := time.Until(cert.NotAfter); left < cert.NotAfter.Sub(cert.NotBefore)/3 {
		return fmt.Errorf("expires in %v", left.Round(time.Hour))
	}
	var hosts []string
	for _, ip := range cert.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	hosts = append(hosts, cert.DNSNames...)
	want := make([]string, 0, len(l.Hosts))
	for _, h := range l.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			h = ip.String()
		}
		want = append(want, h)
	}
	slices.Sort(hosts)
	slices.Sort(want)
	if !l.Server {
		want = nil
	}
	if !slices.Equal(hosts, want) {
		return fmt.Errorf("names %v, want %v", hosts, want)
	}
	var uris []*url.URL
	if l.Identity != nil {
		uris = []*url.URL{l.Identity}
	}
	if !slices.EqualFunc(cert.URIs, uris, func(a, b *url.URL) bool { return a.String() == b.String() }) {
		return fmt.Errorf("identity %v, want %v", cert.URIs, uris)
	}
	server := slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	client := slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	if server != l.Server || client != l.Client {
		return errors.New("different usage")
	}
	if !bytes.Equal(cert.RawIssuer, ca.Cert.RawSubject) {
		return errors.New("another issuer")
	}
	return nil
}

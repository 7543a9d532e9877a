package tlsconfig

import (
	"errors"
	"flag"
	"fmt"
)

// ErrInvalid: the files cannot make the config asked for (a certificate
// without its key, a server without a certificate, a client certificate
// required without a CA to verify it). The message says which.
var ErrInvalid = errors.New("tlsconfig: invalid files")

// Files names the PEM files of one side of a connection. A zero Files
// means no TLS.
type Files struct {
	// CA is the bundle of CA certificates that verifies the other side.
	// Empty: a server verifies no client certificate, a client verifies the
	// server against the system's roots.
	CA string `yaml:"ca"`
	// Cert is this side's certificate, intermediates after it. Empty: a
	// client presents none (a server must have one).
	Cert string `yaml:"cert"`
	// Key is Cert's private key; only its owner may read the file.
	Key string `yaml:"key"`
}

// IsZero reports whether no file is named: the side does not use TLS.
func (f Files) IsZero() bool { return f == Files{} }

// Validate reports a certificate without its key or a key without its
// certificate.
func (f Files) Validate() error {
	if (f.Cert == "") != (f.Key == "") {
		return fmt.Errorf("%w: a certificate and its key go together (cert %q, key %q)", ErrInvalid, f.Cert, f.Key)
	}
	return nil
}

// AddFlags binds f to three flags named prefix+"ca", prefix+"cert" and
// prefix+"key" (prefix "tls-": --tls-ca, --tls-cert, --tls-key). what
// says whose files they are in the flags' usage ("this server's").
func (f *Files) AddFlags(fs *flag.FlagSet, prefix, what string) {
	fs.StringVar(&f.CA, prefix+"ca", f.CA,
		"PEM file of the CA certificates that verify the other side of "+what+" TLS connections (re-read when it changes)")
	fs.StringVar(&f.Cert, prefix+"cert", f.Cert,
		"PEM certificate of "+what+" TLS connections (re-read when it changes; with --"+prefix+"key)")
	fs.StringVar(&f.Key, prefix+"key", f.Key,
		"PEM private key of --"+prefix+"cert, readable by its owner only (re-read when it changes)")
}

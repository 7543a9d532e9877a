package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// MinVersion is the oldest TLS version either side accepts.
const MinVersion = tls.VersionTLS12

// Server returns the config of a server's listeners: its certificate from
// files.Cert and files.Key, and with files.CA the verification of client
// certificates, optional (tls.VerifyClientCertIfGiven) unless
// requireClientCert (tls.RequireAndVerifyClientCert). The files are read
// now (an error names the one that failed) and again when they change
// (doc.go, "Reload"); each handshake uses the config GetConfigForClient
// returns, so the connection's settings are those built here (ALPN is not
// negotiated: HTTP servers serve HTTP/1.1 over it).
func Server(files Files, requireClientCert bool, opts ...Option) (*tls.Config, error) {
	if err := files.Validate(); err != nil {
		return nil, err
	}
	if files.Cert == "" {
		return nil, fmt.Errorf("%w: a server needs a certificate and its key", ErrInvalid)
	}
	if requireClientCert && files.CA == "" {
		return nil, fmt.Errorf("%w: requiring client certificates needs a CA file to verify them", ErrInvalid)
	}
	clientAuth := tls.NoClientCert
	switch {
	case requireClientCert:
		clientAuth = tls.RequireAndVerifyClientCert
	case files.CA != "":
		clientAuth = tls.VerifyClientCertIfGiven
	}
	s, err := newSource(files, func(m *material) {
		m.server = &tls.Config{
			MinVersion:   MinVersion,
			Certificates: []tls.Certificate{*m.cert},
			ClientCAs:    m.pool,
			ClientAuth:   clientAuth,
		}
	}, opts)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: MinVersion,
		ClientAuth: clientAuth, // what the per-handshake configs do, for those who look
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.get().server, nil
		},
	}, nil
}

// Client returns the config of a client's connections: with files.CA the
// server's certificate must chain to it (without, to the system's roots),
// and with files.Cert and files.Key a client certificate is presented when
// the server asks. serverName is the name the server's certificate must
// carry; empty takes the name of the address dialled (doc.go,
// "Verification"). The files are read now and again when they change.
func Client(files Files, serverName string, opts ...Option) (*tls.Config, error) {
	if err := files.Validate(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: MinVersion, ServerName: serverName}
	if files.CA == "" && files.Cert == "" {
		return cfg, nil
	}
	s, err := newSource(files, nil, opts)
	if err != nil {
		return nil, err
	}
	if files.Cert != "" {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.get().cert, nil
		}
	}
	if files.CA != "" {
		// Go's own verification would use a RootCAs fixed now; the server
		// is verified in VerifyConnection instead, against the pool read
		// last, exactly as Go verifies it (chain, validity, usage, name).
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			return verifyServer(s.get().pool, serverName, cs)
		}
	}
	return cfg, nil
}

// errNoServerName: a client config with a CA file was used for a connection
// whose server name it does not know.
var errNoServerName = errors.New("tlsconfig: no server name to verify the server's certificate against " +
	"(an IP address was dialled: give the name to tlsconfig.Client)")

// verifyServer verifies the server's chain against pool for serverName, or
// the connection's server name when serverName is empty.
func verifyServer(pool *x509.CertPool, serverName string, cs tls.ConnectionState) error {
	name := serverName
	if name == "" {
		name = cs.ServerName
	}
	if name == "" {
		return errNoServerName
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tlsconfig: the server sent no certificate")
	}
	opts := x509.VerifyOptions{
		Roots:         pool,
		DNSName:       name,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	return nil
}

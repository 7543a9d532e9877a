package secure

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/pkg/transport"
	"go.uber.org/zap"
)

// Kit is what a broker wires in, built from Options by Build.
type Kit struct {
	opts Options
	// ServerTLS serves the broker's listeners (nil: plaintext).
	ServerTLS *tls.Config
	// ClientTLS is for the broker's own connections (nil: plaintext).
	ClientTLS *tls.Config
	// Credentials are presented on the broker's own connections (nil:
	// none; the client certificate speaks for it, or nothing does).
	Credentials *auth.Credentials
}

// Build reads the credentials file and the certificate files (reload
// failures are logged through lg) and returns the kit.
func (o *Options) Build(lg *zap.Logger) (*Kit, error) {
	if lg == nil {
		lg = zap.NewNop()
	}
	k := &Kit{opts: *o}
	if o.Credentials != (auth.Credentials{}) {
		c := o.Credentials
		k.Credentials = &c
	} else if o.CredentialsFile != "" {
		c, err := auth.ReadCredentialsFile(o.CredentialsFile)
		if err != nil {
			return nil, fmt.Errorf("secure: credentials: %w", err)
		}
		k.Credentials = &c
	}
	onErr := tlsconfig.OnReloadError(func(err error) {
		lg.Error("tls: changed certificate files could not be used; keeping the previous ones", zap.Error(err))
	})
	var err error
	if o.TLS.Cert != "" {
		if k.ServerTLS, err = tlsconfig.Server(o.TLS, false, onErr); err != nil {
			return nil, fmt.Errorf("secure: tls: %w", err)
		}
	}
	if !o.TLS.IsZero() {
		if k.ClientTLS, err = tlsconfig.Client(o.TLS, "", onErr); err != nil {
			return nil, fmt.Errorf("secure: tls: %w", err)
		}
	}
	return k, nil
}

// Listener sets the security fields of a TCP listener's options: TLS,
// authentication against a (nil, or a broker that does not Check: none,
// every connection open), the exposure rule and the connection bounds.
func (k *Kit) Listener(o *netserver.Options, a *auth.Authority) {
	o.TLS = k.ServerTLS
	if a != nil && k.Checks() {
		o.Auth = a
	}
	o.RequireAuth = k.opts.RequireAuth
	o.Insecure = k.opts.Insecure
	k.opts.Limits.Apply(o)
}

// Client sets the security fields of a transport's options: TLS and
// credentials.
func (k *Kit) Client(o *transport.Options) {
	o.TLS = k.ClientTLS
	o.Credentials = k.Credentials
}

// Identified reports whether the broker can prove an identity of its own
// to other servers: credentials, or a client certificate (Options.TLS.Cert).
func (k *Kit) Identified() bool { return k.Credentials != nil || k.opts.TLS.Cert != "" }

// Checks reports whether the broker checks identities at all: it requires
// them, or it can fetch the policy (it has an identity of its own). A
// broker that does neither answers every CmdAuth as the open identity, so
// clients with credentials still work against an open cluster.
func (k *Kit) Checks() bool { return k.opts.RequireAuth || k.Identified() }

// RequireAuth reports whether the TCP port requires an identity.
func (k *Kit) RequireAuth() bool { return k.opts.RequireAuth }

// Insecure reports whether exposed listeners may skip TLS and auth.
func (k *Kit) Insecure() bool { return k.opts.Insecure }

// Authorize returns the ops server's hook: pprof (write false) needs admin
// read, changing the log level (write true) admin write, proven by a
// verified client certificate or an Authorization header checked against
// a. A nil a (no policy) refuses every such request unless the broker
// does not require authentication, where they stay open on loopback.
func (k *Kit) Authorize(a *auth.Authority) func(r *http.Request, write bool) error {
	return func(r *http.Request, write bool) error {
		var verified [][]*x509.Certificate
		if r.TLS != nil {
			verified = r.TLS.VerifiedChains
		}
		p, err := auth.HTTPPrincipal(a, r.Header.Get("Authorization"), verified)
		switch {
		case err != nil:
			return fmt.Errorf("unauthenticated: %w", err)
		case p == nil && !k.opts.RequireAuth && k.ServerTLS == nil:
			return nil // an open broker: its loopback ops port stays open
		case p == nil:
			return fmt.Errorf("unauthenticated: send Authorization: Bearer name:secret")
		case write && !p.CanAdminWrite():
			return protocol.Errorf(protocol.StatusForbidden, "identity "+p.String()+" may not change the log level (admin write)")
		case !write && !p.CanAdminRead():
			return protocol.Errorf(protocol.StatusForbidden, "identity "+p.String()+" may not read profiles (admin read)")
		}
		return nil
	}
}

// Meta returns the options a broker's meta-server clients take
// (registrations, route lookups): TLS and credentials.
func (k *Kit) Meta() []metaclient.Option {
	var o []metaclient.Option
	if k.ClientTLS != nil {
		o = append(o, metaclient.WithTLS(k.ClientTLS))
	}
	if k.Credentials != nil {
		o = append(o, metaclient.WithCredentials(*k.Credentials))
	}
	return o
}

// Policies returns the broker's policy cache (nil when it does not
// Check identities: it could not fetch it): the meta servers' policy,
// kept in path, authenticating as the broker. Call Start; hand
// Authority() to Listener and Authorize.
func (k *Kit) Policies(meta []string, path string, lg *zap.Logger) (*metaclient.PolicyCache, error) {
	if !k.Checks() {
		return nil, nil
	}
	opts := []metaclient.PolicyOption{metaclient.WithPolicyTLS(k.ClientTLS), metaclient.WithPolicyLogger(lg)}
	if k.Credentials != nil {
		opts = append(opts, metaclient.WithPolicyCredentials(*k.Credentials))
	}
	return metaclient.NewPolicyCache(meta, path, opts...)
}

package metaserver

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"

	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"go.uber.org/zap"
)

// tlsConfigs are the meta server's TLS configs, nil where it runs
// plaintext: its listeners' (TCP and HTTP alike), its relays' to brokers
// and its etcd client's.
type tlsConfigs struct {
	server, relay, etcd *tls.Config
}

// tlsConfigs builds them from Options.TLS and EtcdTLS and sets s.httpTLS.
// Reload errors (a certificate replaced by a bad file: the old one stays)
// are logged.
func (s *Server) tlsConfigs() (tlsConfigs, error) {
	var c tlsConfigs
	onErr := tlsconfig.OnReloadError(func(err error) {
		s.lg.Error("tls: changed certificate files could not be used; keeping the previous ones", zap.Error(err))
	})
	if f := s.opts.TLS; f.Cert != "" {
		var err error
		if c.server, err = tlsconfig.Server(f, false, onErr); err != nil {
			return c, fmt.Errorf("metaserver: tls: %w", err)
		}
		if c.relay, err = tlsconfig.Client(f, "", onErr); err != nil {
			return c, fmt.Errorf("metaserver: tls for relays: %w", err)
		}
		s.httpTLS = c.server
	}
	if f := s.opts.EtcdTLS; !f.IsZero() {
		host := ""
		if len(s.opts.EtcdEndpoints) > 0 {
			ep := s.opts.EtcdEndpoints[0]
			if _, rest, ok := strings.Cut(ep, "://"); ok {
				ep = rest
			}
			host, _, _ = net.SplitHostPort(ep)
		}
		var err error
		if c.etcd, err = tlsconfig.Client(f, host, onErr); err != nil {
			return c, fmt.Errorf("metaserver: etcd tls: %w", err)
		}
	}
	return c, nil
}

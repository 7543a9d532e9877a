package metaclient

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
	"go.uber.org/zap"
)

// Caller sends one request and returns the response body; a non-OK status
// is a *protocol.Error. *transport.Client is the real one.
type Caller interface {
	Call(ctx context.Context, addr string, cmd protocol.Command, body []byte) ([]byte, error)
}

// Defaults of a Client.
const (
	DefaultRefreshInterval = 5 * time.Second
	DefaultRequestTimeout  = 3 * time.Second
	DefaultMinEarlyRefresh = 200 * time.Millisecond
	DefaultWatchWait       = 10 * time.Second
)

type config struct {
	caller          Caller
	lg              *zap.Logger
	refreshInterval time.Duration
	requestTimeout  time.Duration
	minEarlyRefresh time.Duration
	heartbeat       time.Duration
	tls             *tls.Config
	credentials     func() (*auth.Credentials, error) // read when the transport is made
	watchWait       time.Duration
}

// Option configures a Client or a Registration.
type Option func(*config)

// WithCaller sends requests through c instead of a transport of the
// client's own (which Close then does not close).
func WithCaller(c Caller) Option { return func(o *config) { o.caller = c } }

// WithLogger logs through lg (default: nothing).
func WithLogger(lg *zap.Logger) Option { return func(o *config) { o.lg = lg } }

// WithRefreshInterval sets how often cached routes are asked again
// (default 5 s).
func WithRefreshInterval(d time.Duration) Option { return func(o *config) { o.refreshInterval = d } }

// WithRequestTimeout bounds each request to a meta server (default 3 s).
func WithRequestTimeout(d time.Duration) Option { return func(o *config) { o.requestTimeout = d } }

// WithMinEarlyRefresh sets the least time between two early refreshes of
// one route (default 200 ms), so a burst of errors costs one lookup.
func WithMinEarlyRefresh(d time.Duration) Option { return func(o *config) { o.minEarlyRefresh = d } }

// WithWatch sets how long a route's long-polling lookup may wait for a
// change (default 10 s): a Client keeps one per cached route (up to
// MaxWatchedRoutes), so a failover or a state change reaches it within a
// round trip of the meta server's view. 0 turns watching off (routes are
// then refreshed every refresh interval and on errors only).
func WithWatch(wait time.Duration) Option { return func(o *config) { o.watchWait = wait } }

// WithHeartbeatInterval sets how often a Registration heartbeats (default:
// a third of the lease TTL the meta server grants; never more than half of
// it, so one lost heartbeat cannot cost the lease).
func WithHeartbeatInterval(d time.Duration) Option { return func(o *config) { o.heartbeat = d } }

// WithTLS makes the connections to the meta servers TLS, configured by cfg
// (pkg/tlsconfig.Client builds one from the cluster's CA file and, for a
// broker proving its group by certificate, its certificate). It has no
// effect with WithCaller.
func WithTLS(cfg *tls.Config) Option { return func(o *config) { o.tls = cfg } }

// WithCredentials proves who this client is to the meta servers (an
// application looking up routes, or a broker of a group registering): every
// new connection presents the identity's name and secret first. Use it
// with WithTLS. It has no effect with WithCaller.
func WithCredentials(creds auth.Credentials) Option {
	return func(o *config) { o.credentials = func() (*auth.Credentials, error) { return &creds, nil } }
}

// WithCredentialsFile is WithCredentials with "name:secret" read from a
// file that only its owner may read (mode 0600), when New or Register runs.
func WithCredentialsFile(path string) Option {
	return func(o *config) {
		o.credentials = func() (*auth.Credentials, error) { return transport.CredentialsFromFile(path) }
	}
}

// WithCredentialsFromEnv is WithCredentials with "name:secret" read from the
// environment variable QMQ_CREDENTIALS when New or Register runs; when it
// is unset no credentials are presented.
func WithCredentialsFromEnv() Option {
	return func(o *config) { o.credentials = transport.CredentialsFromEnv }
}

// newTransport makes the transport of a Client or Registration that was
// given no Caller.
func (c *config) newTransport() (*transport.Client, error) {
	opts := transport.Options{RequestTimeout: c.requestTimeout, TLS: c.tls}
	if c.credentials != nil {
		creds, err := c.credentials()
		if err != nil {
			return nil, fmt.Errorf("metaclient: credentials: %w", err)
		}
		opts.Credentials = creds
	}
	return transport.New(opts, c.lg.Named("transport"))
}

func newConfig(opts []Option) config {
	c := config{
		lg:              zap.NewNop(),
		refreshInterval: DefaultRefreshInterval,
		requestTimeout:  DefaultRequestTimeout,
		minEarlyRefresh: DefaultMinEarlyRefresh,
		watchWait:       DefaultWatchWait,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.lg == nil {
		c.lg = zap.NewNop()
	}
	return c
}

package producer

import (
	"go.opentelemetry.io/otel/trace"

	"crypto/tls"
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/transport"
	"go.uber.org/zap"
)

// Option configures a Producer.
type Option func(*config)

type config struct {
	resolver      route.Resolver
	metaServers   []string // WithMetaServers: New makes a metaclient over the producer's transport
	transport     *transport.Client
	transportOpts transport.Options
	tls           *tls.Config
	credentials   func() (*auth.Credentials, error) // read when New runs
	logger        *zap.Logger
	limits        protocol.Limits
	batchMessages int
	batchBytes    int
	linger        time.Duration
	busyInFlight  int           // WithBusyLinger: requests in flight from which…
	busyLinger    time.Duration // …a partial batch waits this long
	queueSize     int
	nonBlocking   bool
	maxInFlight   int
	sendTimeout   time.Duration
	requestTime   time.Duration
	delayMin      time.Duration
	delayFallback bool
	spin          time.Duration
	now           func() time.Time
	tracer        trace.Tracer // nil: tracing off (tracing.go)
}

func defaultConfig() config {
	return config{
		limits:        protocol.DefaultLimits,
		batchMessages: 256,              // messages per send request
		batchBytes:    1 << 20,          // bytes per send request
		queueSize:     10000,            // messages waiting to be batched
		maxInFlight:   8,                // send requests in flight per group
		sendTimeout:   30 * time.Second, // per message, retries included
		requestTime:   5 * time.Second,  // per send request
		delayMin:      500 * time.Millisecond,
		spin:          30 * time.Microsecond, // a lone Send's wait for its answer (WithSendSpin)
		now:           time.Now,
	}
}

func (c *config) validate() error {
	switch {
	case c.resolver == nil && len(c.metaServers) == 0:
		return ErrNoResolver
	case c.resolver != nil && len(c.metaServers) > 0:
		return fmt.Errorf("producer: WithMetaServers and WithResolver/WithBrokers both name where the brokers are; give one")
	case c.batchMessages <= 0:
		return fmt.Errorf("producer: batch messages must be positive, got %d", c.batchMessages)
	case c.batchBytes <= 0:
		return fmt.Errorf("producer: batch bytes must be positive, got %d", c.batchBytes)
	case c.queueSize <= 0:
		return fmt.Errorf("producer: queue size must be positive, got %d", c.queueSize)
	case c.maxInFlight <= 0:
		return fmt.Errorf("producer: max in flight must be positive, got %d", c.maxInFlight)
	case c.sendTimeout <= 0 || c.requestTime <= 0:
		return fmt.Errorf("producer: timeouts must be positive")
	case c.spin < 0:
		return fmt.Errorf("producer: send spin must not be negative, got %v", c.spin)
	case c.linger < 0:
		return fmt.Errorf("producer: linger must not be negative, got %v", c.linger)
	case c.busyLinger < 0 || c.busyInFlight < 0:
		return fmt.Errorf("producer: busy linger must not be negative, got %d requests, %v", c.busyInFlight, c.busyLinger)
	case c.transport != nil && (c.tls != nil || c.credentials != nil):
		return fmt.Errorf("producer: WithTLS and WithCredentials configure the producer's own transport; " +
			"give a shared one (WithTransport) its TLS config and credentials in its transport.Options")
	}
	return c.limits.Validate()
}

// WithResolver sets where the producer finds broker groups (pkg/metaclient,
// or route.NewStatic).
func WithResolver(r route.Resolver) Option { return func(c *config) { c.resolver = r } }

// WithMetaServers finds broker groups through the meta servers at addrs
// (their TCP addresses, as host:port; scripts/run-local.sh's is
// 127.0.0.1:20880): New makes a pkg/metaclient client over the producer's own
// connections (so WithTLS and WithCredentials apply to it too) and Close
// closes it. WithResolver with a metaclient.Client does the same with a
// client shared by several producers and consumers.
func WithMetaServers(addrs ...string) Option {
	return func(c *config) { c.metaServers = append([]string(nil), addrs...) }
}

// WithBrokers routes every subject to fixed realtime broker groups at addrs
// (no delay groups): for tests and setups without a meta server.
func WithBrokers(addrs ...string) Option {
	return func(c *config) { c.resolver = route.NewStatic(route.Groups(addrs...), nil) }
}

// WithTransport shares a transport client (and its connections and
// breakers) with other users; the producer does not close it.
func WithTransport(t *transport.Client) Option { return func(c *config) { c.transport = t } }

// WithTransportOptions configures the producer's own transport client.
func WithTransportOptions(o transport.Options) Option {
	return func(c *config) { c.transportOpts = o }
}

// WithTLS makes every connection of the producer TLS, configured by cfg:
// pkg/tlsconfig.Client builds one from the cluster's CA file (and a client
// certificate, when the producer proves its identity with one) and follows
// the files when they change. It sets transport.Options.TLS of the
// producer's own transport client unless WithTransportOptions sets it.
func WithTLS(cfg *tls.Config) Option { return func(c *config) { c.tls = cfg } }

// WithCredentials proves who the producer is: every new connection
// presents the identity's name and secret before its first request, and a
// refusal fails the send with an error that matches
// protocol.ErrUnauthenticated and names the identity. Use it with WithTLS:
// the secret crosses the network in the request. It sets
// transport.Options.Credentials unless WithTransportOptions sets them.
func WithCredentials(creds auth.Credentials) Option {
	return func(c *config) { c.credentials = func() (*auth.Credentials, error) { return &creds, nil } }
}

// WithCredentialsFile is WithCredentials with "name:secret" read from a file
// when New runs; only the file's owner may read it (mode 0600).
func WithCredentialsFile(path string) Option {
	return func(c *config) {
		c.credentials = func() (*auth.Credentials, error) { return transport.CredentialsFromFile(path) }
	}
}

// WithCredentialsFromEnv is WithCredentials with "name:secret" read from the
// environment variable QMQ_CREDENTIALS when New runs; when it is unset the
// producer presents no credentials.
func WithCredentialsFromEnv() Option {
	return func(c *config) { c.credentials = transport.CredentialsFromEnv }
}

// WithSendSpin sets how long a synchronous Send with nothing else in
// flight polls its connection for the broker's answer before it blocks in
// the read (default 30 µs; 0 turns it off): an answer that comes within
// microseconds then does not wait for the thread to be woken. A connection
// whose answers keep coming later (a broker far away, a durable flush)
// stops spinning after a few misses. It sets transport.Options.Spin of the
// producer's own transport client unless WithTransportOptions sets it.
func WithSendSpin(d time.Duration) Option { return func(c *config) { c.spin = d } }

// WithLogger sets the logger (default none).
func WithLogger(lg *zap.Logger) Option { return func(c *config) { c.logger = lg } }

// WithLimits sets the message limits checked before sending (default
// protocol.DefaultLimits; brokers enforce their own).
func WithLimits(l protocol.Limits) Option { return func(c *config) { c.limits = l } }

// WithBatch bounds one send request: at most messages messages and about
// bytes bytes (defaults 256 and 1 MiB).
func WithBatch(messages, bytes int) Option {
	return func(c *config) { c.batchMessages, c.batchBytes = messages, bytes }
}

// WithLinger makes a batch wait up to d for more messages before it is sent
// (default 0: a batch goes out as soon as the queue has nothing more to add).
func WithLinger(d time.Duration) Option { return func(c *config) { c.linger = d } }

// WithBusyLinger makes a batch that is not full wait up to d for more
// messages while at least inFlight requests to its group are unanswered
// (default off; no effect with WithLinger). A burst of messages queued one
// by one then goes out as a few small requests, whose answers come early,
// and then as full ones, instead of a request each time the queue is
// momentarily empty; a lone message still goes out at once.
func WithBusyLinger(inFlight int, d time.Duration) Option {
	return func(c *config) { c.busyInFlight, c.busyLinger = inFlight, d }
}

// WithQueueSize bounds the messages waiting to be batched (default 10,000).
// sendLoop takes them up to 4,096 at a time, so while every batch waits for
// an in-flight slot up to that many more may wait, taken but not batched.
func WithQueueSize(n int) Option { return func(c *config) { c.queueSize = n } }

// WithNonBlocking makes SendAsync fail with ErrQueueFull instead of waiting
// when the queue is full.
func WithNonBlocking() Option { return func(c *config) { c.nonBlocking = true } }

// WithMaxInFlight bounds the send requests in flight to one broker group
// (default 8).
func WithMaxInFlight(n int) Option { return func(c *config) { c.maxInFlight = n } }

// WithSendTimeout bounds how long one message may take, retries included
// (default 30 s).
func WithSendTimeout(d time.Duration) Option { return func(c *config) { c.sendTimeout = d } }

// WithRequestTimeout bounds one send request (default 5 s).
func WithRequestTimeout(d time.Duration) Option { return func(c *config) { c.requestTime = d } }

// WithDelayFallback sends delayed messages to the subject's realtime groups
// when no delay group is known, instead of failing them: consumers hold such
// messages until their deliver-at time, so they are still never early, but
// they occupy the consumers meanwhile. The consumer library uses it for
// retries when a cluster has no delay server.
func WithDelayFallback() Option { return func(c *config) { c.delayFallback = true } }

// withClock replaces time.Now (tests).
func withClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

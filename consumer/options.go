package consumer

import (
	"go.opentelemetry.io/otel/trace"

	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/transport"
	"go.uber.org/zap"
)

// Option configures a Consumer.
type Option func(*config)

type config struct {
	resolver      route.Resolver
	metaServers   []string // WithMetaServers: New makes a metaclient over the consumer's transport
	transport     *transport.Client
	transportOpts transport.Options
	tls           *tls.Config
	credentials   func() (*auth.Credentials, error) // read when New runs
	logger        *zap.Logger
	consumerID    string
	routeRefresh  time.Duration
	now           func() time.Time
	tracer        trace.Tracer // nil: tracing off (tracing.go)
}

func defaultConfig() config {
	return config{
		routeRefresh: 5 * time.Second, // how often subscriptions look for new broker groups
		now:          time.Now,
	}
}

func (c *config) validate() error {
	if c.resolver == nil && len(c.metaServers) == 0 {
		return ErrNoResolver
	}
	if c.resolver != nil && len(c.metaServers) > 0 {
		return errors.New("consumer: WithMetaServers and WithResolver/WithBrokers both name where the brokers are; give one")
	}
	if c.consumerID != "" {
		if err := protocol.CheckConsumerID(c.consumerID); err != nil {
			return fmt.Errorf("consumer: %w", err)
		}
	}
	if c.routeRefresh <= 0 {
		return fmt.Errorf("consumer: route refresh must be positive, got %v", c.routeRefresh)
	}
	if c.transport != nil && (c.tls != nil || c.credentials != nil) {
		return errors.New("consumer: WithTLS and WithCredentials configure the consumer's own transport; " +
			"give a shared one (WithTransport) its TLS config and credentials in its transport.Options")
	}
	return nil
}

// WithResolver sets where the consumer finds broker groups.
func WithResolver(r route.Resolver) Option { return func(c *config) { c.resolver = r } }

// WithMetaServers finds broker groups through the meta servers at addrs
// (their TCP addresses, as host:port; scripts/run-local.sh's is
// 127.0.0.1:20880): New makes a pkg/metaclient client over the consumer's own
// connections (so WithTLS and WithCredentials apply to it too) and Close
// closes it. WithResolver with a metaclient.Client does the same with a
// client shared by several consumers and producers.
func WithMetaServers(addrs ...string) Option {
	return func(c *config) { c.metaServers = append([]string(nil), addrs...) }
}

// WithBrokers uses fixed realtime broker groups at addrs (tests, setups
// without a meta server).
func WithBrokers(addrs ...string) Option {
	return func(c *config) { c.resolver = route.NewStatic(route.Groups(addrs...), nil) }
}

// WithTransport shares a transport client; the consumer does not close it.
func WithTransport(t *transport.Client) Option { return func(c *config) { c.transport = t } }

// WithTransportOptions configures the consumer's own transport client.
func WithTransportOptions(o transport.Options) Option { return func(c *config) { c.transportOpts = o } }

// WithTLS makes every connection of the consumer (pulls, acks, and the
// retries it sends) TLS, configured by cfg: pkg/tlsconfig.Client builds one
// from the cluster's CA file (and a client certificate, when the consumer
// proves its identity with one) and follows the files when they change. It
// sets transport.Options.TLS unless WithTransportOptions sets it.
func WithTLS(cfg *tls.Config) Option { return func(c *config) { c.tls = cfg } }

// WithCredentials proves who the consumer is: every new connection
// presents the identity's name and secret before its first request; a
// refusal fails the pulls with an error that matches
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
// consumer presents no credentials.
func WithCredentialsFromEnv() Option {
	return func(c *config) { c.credentials = transport.CredentialsFromEnv }
}

// WithLogger sets the logger (default none).
func WithLogger(lg *zap.Logger) Option { return func(c *config) { c.logger = lg } }

// WithConsumerID sets this consumer's id. It must stay the same across
// restarts of the same consumer and differ between consumers (default: the
// host name and a hash of the executable's path and working directory).
func WithConsumerID(id string) Option { return func(c *config) { c.consumerID = id } }

// WithRouteRefresh sets how often subscriptions look for added or removed
// broker groups (default 5 s).
func WithRouteRefresh(d time.Duration) Option { return func(c *config) { c.routeRefresh = d } }

// SubscribeOption configures one subscription.
type SubscribeOption func(*subConfig)

type subConfig struct {
	concurrency  int
	tagMode      protocol.TagMode
	tags         []string
	broadcast    bool
	earliest     bool
	maxAttempts  int
	retryBase    time.Duration
	retryMax     time.Duration
	idempotency  IdempotencyChecker
	batch        int
	pullDepth    int
	pullTimeout  time.Duration
	maxUnacked   int
	heartbeat    time.Duration
	retrySubject bool
	ackEach      bool
	ackSingly    bool // AckEachSingly: no list acks
}

func defaultSubConfig() subConfig {
	return subConfig{
		concurrency:  1,
		maxAttempts:  16,
		retryBase:    5 * time.Second,
		retryMax:     5 * time.Minute,
		batch:        64,
		pullDepth:    2,
		pullTimeout:  2 * time.Second,
		maxUnacked:   256,
		heartbeat:    5 * time.Second,
		retrySubject: true,
	}
}

func (s *subConfig) validate() error {
	switch {
	case s.concurrency <= 0:
		return fmt.Errorf("consumer: concurrency must be positive, got %d", s.concurrency)
	case s.maxAttempts <= 0:
		return fmt.Errorf("consumer: max attempts must be positive, got %d", s.maxAttempts)
	case s.retryBase <= 0 || s.retryMax < s.retryBase:
		return fmt.Errorf("consumer: retry back-off must be positive and base ≤ max")
	case s.batch <= 0 || s.batch > 10000:
		return fmt.Errorf("consumer: batch must be in 1..10000, got %d", s.batch)
	case s.pullDepth < 1 || s.pullDepth > 16:
		return fmt.Errorf("consumer: pull depth must be in 1..16, got %d", s.pullDepth)
	case s.pullTimeout < 0:
		return fmt.Errorf("consumer: pull timeout must not be negative")
	case s.maxUnacked < s.batch:
		return fmt.Errorf("consumer: max unacked (%d) must be at least the batch (%d)", s.maxUnacked, s.batch)
	case len(s.tags) > 255:
		return fmt.Errorf("consumer: at most 255 tags")
	}
	return nil
}

// Concurrency sets how many messages a subscription handles at once
// (default 1).
func Concurrency(n int) SubscribeOption { return func(s *subConfig) { s.concurrency = n } }

// TagsAny receives only messages carrying at least one of tags.
func TagsAny(tags ...string) SubscribeOption {
	return func(s *subConfig) { s.tagMode, s.tags = protocol.TagAny, tags }
}

// TagsAll receives only messages carrying every one of tags.
func TagsAll(tags ...string) SubscribeOption {
	return func(s *subConfig) { s.tagMode, s.tags = protocol.TagAll, tags }
}

// Broadcast makes every consumer of the group receive every message (each
// consumer has its own position). Failed messages are retried in process.
func Broadcast() SubscribeOption { return func(s *subConfig) { s.broadcast = true } }

// StartEarliest makes a new consumer group start at the oldest stored
// message instead of the newest (an existing group keeps its position).
func StartEarliest() SubscribeOption { return func(s *subConfig) { s.earliest = true } }

// MaxAttempts sets how many deliveries a message gets before it goes to the
// dead-letter subject (default 16).
func MaxAttempts(n int) SubscribeOption { return func(s *subConfig) { s.maxAttempts = n } }

// RetryBackoff sets the retry delay: base after the first failure, doubling
// per attempt up to max (defaults 5 s and 5 minutes).
func RetryBackoff(base, max time.Duration) SubscribeOption {
	return func(s *subConfig) { s.retryBase, s.retryMax = base, max }
}

// Idempotency sets a checker that skips messages already handled.
func Idempotency(c IdempotencyChecker) SubscribeOption {
	return func(s *subConfig) { s.idempotency = c }
}

// PullBatch sets how many messages one pull asks for (default 64).
func PullBatch(n int) SubscribeOption { return func(s *subConfig) { s.batch = n } }

// PullDepth sets how many pulls a subscription keeps in flight to each
// broker group while there is a backlog (default 2): the next batch is on
// its way while handlers work through this one. 1 waits for each answer
// before asking again. Pulls in flight never ask for more than MaxUnacked
// leaves room for.
func PullDepth(n int) SubscribeOption { return func(s *subConfig) { s.pullDepth = n } }

// PullTimeout sets how long a broker may hold a pull waiting for messages
// (default 2 s).
func PullTimeout(d time.Duration) SubscribeOption { return func(s *subConfig) { s.pullTimeout = d } }

// MaxUnacked bounds the pulled but unfinished messages per broker group
// (default 256); at the bound the subscription stops pulling from it.
func MaxUnacked(n int) SubscribeOption { return func(s *subConfig) { s.maxUnacked = n } }

// AckEach acks every message on its own once its handler returned, naming
// only that message, sent in pull-sequence order with up to MaxUnacked (at
// most 1,024) in flight per broker group — the broker applies one
// consumer's acks in the order they arrive, so pipelined acks never look
// like lost ones — instead of the default range acks (one request for the
// longest finished prefix, up to half of MaxUnacked messages). Acks that
// are ready at the same time travel in one request listing each pull seq
// (protocol.AckList; never a range), as nsqd's FINs share a write. A
// message counts against MaxUnacked until its ack was answered, as a
// message in flight does in nsqd (until FIN) or JetStream (MaxAckPending).
// A failed ack is sent again after a back-off (50 ms doubling to 1 s); the
// acks sent after it may have been applied, and the broker then retries its
// message as one whose ack was lost (at least once). For comparisons with
// peers that ack each message; range acks are the cheaper default.
func AckEach() SubscribeOption { return func(s *subConfig) { s.ackEach = true } }

// AckEachSingly is AckEach with every ack in a request of its own, never
// listed with others: what a broker that predates list acks gets. It costs
// the consumer and the broker a request per message; for comparisons.
func AckEachSingly() SubscribeOption {
	return func(s *subConfig) { s.ackEach, s.ackSingly = true, true }
}

package gateway

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/logging"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
)

// ErrInvalidOptions: Validate refused the options; the message says which.
var ErrInvalidOptions = errors.New("gateway: invalid options")

// Options configure a gateway. NewOptions gives the defaults.
type Options struct {
	// Addr is the HTTP listen address (default 127.0.0.1:8080).
	Addr string `yaml:"addr"`
	// MetaServers are the meta servers' TCP addresses the clients resolve
	// routes through. Exactly one of MetaServers and Brokers is set.
	MetaServers []string `yaml:"meta"`
	// Brokers is a static list of realtime broker addresses (no meta
	// server, no delay server): for tests and benchmarks.
	Brokers []string `yaml:"brokers"`
	// MaxBodyBytes bounds a request body (default 8 MiB): larger is 413.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxBatch bounds the messages of one publish request (default 1000).
	MaxBatch int `yaml:"max_batch"`
	// MaxPull bounds a pull's max (default 1000).
	MaxPull int `yaml:"max_pull"`
	// DefaultWait is a pull's long-poll wait when it names none (default 5 s).
	DefaultWait time.Duration `yaml:"default_wait"`
	// MaxWait bounds a pull's wait (default 30 s): a longer wait is 400.
	MaxWait time.Duration `yaml:"max_wait"`
	// ConsumerTimeout: a consumer id with no pull, ack or nack for this
	// long loses its session; its un-acked messages go back to the group
	// at once (default 30 s, the brokers' default consumer timeout).
	ConsumerTimeout time.Duration `yaml:"consumer_timeout"`
	// MaxInFlight bounds the messages being published through this
	// gateway at once (default 200000); past it a publish is 429 with
	// Retry-After.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxIdentities bounds the identities (bearer credentials) with
	// clients of their own (default 1024); past it a new one is 429.
	MaxIdentities int `yaml:"max_identities"`
	// SendTimeout bounds how long a publish keeps retrying a message on
	// other broker groups (default 10 s).
	SendTimeout time.Duration `yaml:"send_timeout"`
	// ProducerBatch and ProducerInFlight configure each identity's
	// producer: messages per send request and send requests in flight per
	// broker group (defaults 100 and 64). Concurrent publishes need many
	// requests in flight, which a durable broker stores with one fsync:
	// the producer's own 256 and 8 held the gateway suite at half the
	// rate (NOTES.md).
	ProducerBatch    int `yaml:"producer_batch"`
	ProducerInFlight int `yaml:"producer_in_flight"`
	// PullBatch and MaxUnacked configure each consumer session's pulls
	// from every broker group (defaults 128 and 4096).
	PullBatch  int `yaml:"pull_batch"`
	MaxUnacked int `yaml:"max_unacked"`
	// ShutdownTimeout bounds Close in the binary (default 15 s).
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`

	// HTTPTLS are the files of the gateway's HTTPS listener (zero: plain
	// HTTP). With a CA, client certificates are verified when given.
	HTTPTLS tlsconfig.Files `yaml:"tls"`
	// BrokerTLS are the files of the gateway's connections to the cluster
	// (zero: plain TCP).
	BrokerTLS tlsconfig.Files `yaml:"broker_tls"`
	// CredentialsFile holds "name:secret", the gateway's own identity,
	// used for requests that carry no bearer credential. Empty: such
	// requests reach the cluster with no identity.
	CredentialsFile string `yaml:"credentials_file"`
	// RequireCredentials refuses requests without a bearer credential
	// (401) instead of serving them as the gateway's own identity.
	RequireCredentials bool `yaml:"require_credentials"`
	// Insecure allows a non-loopback listener without TLS (refused
	// otherwise, as on every QMQ-Go server).
	Insecure bool `yaml:"insecure"`

	Log logging.Options `yaml:"log"`

	// BrokerTLSConfig, when set, is used for the connections to the
	// cluster instead of one built from BrokerTLS (library users, tests).
	BrokerTLSConfig *tls.Config `yaml:"-"`

	// Set by New from the files.
	serverTLS   *tls.Config
	brokerTLS   *tls.Config
	credentials *auth.Credentials
}

// NewOptions returns the defaults.
func NewOptions() Options {
	return Options{
		Addr:             "127.0.0.1:8080",
		MaxBodyBytes:     8 << 20,
		MaxBatch:         1000,
		MaxPull:          1000,
		DefaultWait:      5 * time.Second,
		MaxWait:          30 * time.Second,
		ConsumerTimeout:  30 * time.Second,
		MaxInFlight:      200000,
		MaxIdentities:    1024,
		SendTimeout:      10 * time.Second,
		ProducerBatch:    100,
		ProducerInFlight: 64,
		PullBatch:        128,
		MaxUnacked:       4096,
		ShutdownTimeout:  15 * time.Second,
		Log:              logging.NewOptions(),
	}
}

// AddFlags binds the options to flags on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Addr, "addr", o.Addr, "HTTP listen address")
	fs.Func("meta", "meta server TCP address (repeat or comma-separate)", func(s string) error {
		o.MetaServers = append(o.MetaServers, splitList(s)...)
		return nil
	})
	fs.Func("brokers", "static realtime broker addresses instead of --meta (tests, benchmarks)", func(s string) error {
		o.Brokers = append(o.Brokers, splitList(s)...)
		return nil
	})
	fs.Int64Var(&o.MaxBodyBytes, "max-body-bytes", o.MaxBodyBytes, "largest request body")
	fs.IntVar(&o.MaxBatch, "max-batch", o.MaxBatch, "most messages in one publish request")
	fs.IntVar(&o.MaxPull, "max-pull", o.MaxPull, "largest max of one pull")
	fs.DurationVar(&o.DefaultWait, "default-wait", o.DefaultWait, "long-poll wait of a pull that names none")
	fs.DurationVar(&o.MaxWait, "max-wait", o.MaxWait, "longest long-poll wait a pull may ask for")
	fs.DurationVar(&o.ConsumerTimeout, "consumer-timeout", o.ConsumerTimeout, "silence after which a consumer id's un-acked messages go back to its group")
	fs.IntVar(&o.MaxInFlight, "max-in-flight", o.MaxInFlight, "messages being published at once before publishes get 429")
	fs.IntVar(&o.MaxIdentities, "max-identities", o.MaxIdentities, "identities with clients of their own")
	fs.DurationVar(&o.SendTimeout, "send-timeout", o.SendTimeout, "how long a publish retries a message")
	fs.IntVar(&o.ProducerBatch, "producer-batch", o.ProducerBatch, "messages per send request of the gateway's producers")
	fs.IntVar(&o.ProducerInFlight, "producer-in-flight", o.ProducerInFlight, "send requests in flight per broker group of the gateway's producers")
	fs.IntVar(&o.PullBatch, "pull-batch", o.PullBatch, "messages per broker pull of a consumer session")
	fs.IntVar(&o.MaxUnacked, "max-unacked", o.MaxUnacked, "un-acked messages per consumer session and broker group")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "how long shutdown waits for requests in flight")
	o.HTTPTLS.AddFlags(fs, "tls-", "the gateway's HTTPS")
	o.BrokerTLS.AddFlags(fs, "broker-tls-", "the gateway's cluster")
	fs.StringVar(&o.CredentialsFile, "credentials-file", o.CredentialsFile, "file holding name:secret, the gateway's own identity for requests without a bearer credential")
	fs.BoolVar(&o.RequireCredentials, "require-credentials", o.RequireCredentials, "refuse requests without a bearer credential")
	fs.BoolVar(&o.Insecure, "insecure", o.Insecure, "allow a non-loopback listener without TLS")
	o.Log.AddFlags(fs)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Validate checks the options.
func (o *Options) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, a...)...)
	}
	switch {
	case o.Addr == "":
		return bad("no listen address")
	case (len(o.MetaServers) == 0) == (len(o.Brokers) == 0):
		return bad("give meta servers or brokers (exactly one of them)")
	case o.MaxBodyBytes < 1024:
		return bad("max body bytes %d below 1024", o.MaxBodyBytes)
	case o.MaxBatch < 1 || o.MaxPull < 1:
		return bad("max batch and max pull must be positive")
	case o.DefaultWait < 0 || o.MaxWait <= 0 || o.DefaultWait > o.MaxWait:
		return bad("waits: need 0 ≤ default wait ≤ max wait, max wait > 0")
	case o.ConsumerTimeout <= 0 || o.SendTimeout <= 0 || o.ShutdownTimeout <= 0:
		return bad("timeouts must be positive")
	case o.MaxInFlight < o.MaxBatch:
		return bad("max in flight %d below max batch %d", o.MaxInFlight, o.MaxBatch)
	case o.MaxIdentities < 1:
		return bad("max identities must be positive")
	case o.ProducerBatch < 1 || o.ProducerInFlight < 1:
		return bad("producer batch and producer in flight must be positive")
	case o.PullBatch < 1 || o.PullBatch > 10000 || o.MaxUnacked < o.PullBatch:
		return bad("pull batch must be in 1..10000 and max unacked at least the pull batch")
	}
	if err := o.HTTPTLS.Validate(); err != nil {
		return err
	}
	if err := o.BrokerTLS.Validate(); err != nil {
		return err
	}
	return o.Log.Validate()
}

package secure

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/exposure"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
)

// Options are a broker's security settings. The zero value is a plaintext
// broker with open access on loopback addresses.
type Options struct {
	// TLS names the broker's certificate, key and CA (see "One set of
	// files"). Cert and Key make every listener TLS only. Default: none.
	TLS tlsconfig.Files `yaml:"tls"`
	// RequireAuth refuses every TCP command but ping until the connection
	// proves an identity. Default false.
	RequireAuth bool `yaml:"auth"`
	// Insecure lets a listener on a non-loopback address run without TLS
	// and RequireAuth. Default false: the broker refuses to start.
	Insecure bool `yaml:"insecure"`
	// Credentials are what the broker presents to other servers (meta
	// servers, its master, realtime brokers) when its certificate does
	// not speak for it. Set in code, or from CredentialsFile or
	// QMQ_CREDENTIALS; never a flag.
	Credentials auth.Credentials `yaml:"-"`
	// CredentialsFile holds "name:secret" (mode 0600 or stricter).
	CredentialsFile string `yaml:"credentials_file"`
	// Limits bound the TCP port's connections (netserver's defaults when
	// zero).
	Limits Limits `yaml:"limits"`
}

// Limits are the connection bounds of a broker's TCP port; zero fields take
// pkg/netserver's defaults (written next to each).
type Limits struct {
	// MaxConns bounds open connections (default 10,000).
	MaxConns int `yaml:"max_conns"`
	// MaxConnsPerIdentity bounds one identity's connections (default 1,000).
	MaxConnsPerIdentity int `yaml:"max_conns_per_identity"`
	// MaxPartialBytes bounds the bytes held in incomplete frames over all
	// connections (default 256 MiB).
	MaxPartialBytes int64 `yaml:"max_partial_bytes"`
	// IdleTimeout closes a connection idle this long (default 10 min;
	// negative: never).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MinReadRate closes a connection whose frame in progress arrives
	// slower, in bytes a second over ReadRateWindow (default 4,096 over
	// 20 s; negative: never).
	MinReadRate    int           `yaml:"min_read_rate"`
	ReadRateWindow time.Duration `yaml:"read_rate_window"`
}

// AddFlags binds the bounds to fs: --max-conns, --max-conns-per-identity,
// --max-partial-bytes, --idle-timeout, --min-read-rate, --read-rate-window.
func (l *Limits) AddFlags(fs *flag.FlagSet) {
	fs.IntVar(&l.MaxConns, "max-conns", l.MaxConns, "open TCP connections at most (0: 10000)")
	fs.IntVar(&l.MaxConnsPerIdentity, "max-conns-per-identity", l.MaxConnsPerIdentity, "TCP connections of one identity at most (0: 1000)")
	fs.Int64Var(&l.MaxPartialBytes, "max-partial-bytes", l.MaxPartialBytes, "bytes held in incomplete frames over all connections at most (0: 256 MiB)")
	fs.DurationVar(&l.IdleTimeout, "idle-timeout", l.IdleTimeout, "close a TCP connection idle this long (0: 10m, negative: never)")
	fs.IntVar(&l.MinReadRate, "min-read-rate", l.MinReadRate, "close a connection whose frame arrives slower, bytes/s (0: 4096, negative: never)")
	fs.DurationVar(&l.ReadRateWindow, "read-rate-window", l.ReadRateWindow, "span --min-read-rate is measured over (0: 20s)")
}

// Apply sets the bounds of a TCP listener's options.
func (l Limits) Apply(o *netserver.Options) {
	o.MaxConns, o.MaxConnsPerIdentity, o.MaxPartialBytes = l.MaxConns, l.MaxConnsPerIdentity, l.MaxPartialBytes
	o.IdleTimeout, o.MinReadRate, o.ReadRateWindow = l.IdleTimeout, l.MinReadRate, l.ReadRateWindow
}

// Validate checks the bounds as netserver would.
func (l Limits) Validate() error {
	var o netserver.Options
	l.Apply(&o)
	return o.Validate()
}

// EnvCredentials is the environment variable the binaries read
// credentials from ("name:secret").
const EnvCredentials = "QMQ_CREDENTIALS"

// ErrInvalidOptions wraps every Validate failure.
var ErrInvalidOptions = errors.New("secure: invalid options")

// AddFlags binds the options to fs: --tls-ca, --tls-cert, --tls-key,
// --auth, --insecure, --credentials-file and the connection bounds.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	o.TLS.AddFlags(fs, "tls-", "this broker's")
	fs.BoolVar(&o.RequireAuth, "auth", o.RequireAuth, "require every TCP connection to prove an identity (TLS client certificate or credentials)")
	fs.BoolVar(&o.Insecure, "insecure", o.Insecure, "listen on a non-loopback address without TLS and --auth (anyone who reaches the port may use it)")
	fs.StringVar(&o.CredentialsFile, "credentials-file", o.CredentialsFile, "file holding name:secret this broker presents to other servers, mode 0600 (env "+EnvCredentials+")")
	o.Limits.AddFlags(fs)
}

// FromEnvironment takes Credentials from QMQ_CREDENTIALS (getenv is
// os.Getenv in the binaries) unless they are set.
func (o *Options) FromEnvironment(getenv func(string) string) error {
	if v := getenv(EnvCredentials); v != "" && o.Credentials == (auth.Credentials{}) {
		c, err := auth.ParseCredentials(v)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalidOptions, EnvCredentials, err)
		}
		o.Credentials = c
	}
	return nil
}

// Validate checks the files and that every address in addrs (the
// broker's TCP and HTTP listeners) is loopback, or served with TLS and
// RequireAuth, or allowed by Insecure.
func (o *Options) Validate(addrs ...string) error {
	if err := o.TLS.Validate(); err != nil {
		return fmt.Errorf("%w: tls: %w", ErrInvalidOptions, err)
	}
	for _, a := range addrs {
		if a == "" {
			continue
		}
		if err := exposure.Check(a, o.TLS.Cert != "", o.RequireAuth, o.Insecure); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
		}
	}
	if err := o.Limits.Validate(); err != nil {
		return fmt.Errorf("%w: limits: %w", ErrInvalidOptions, err)
	}
	return nil
}

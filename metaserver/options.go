package metaserver

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/exposure"
	"github.com/qmq-go/qmq/pkg/logging"
	"github.com/qmq-go/qmq/pkg/secure"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
)

// Options configure a meta server. NewOptions holds every default; a zero
// Options is not valid (use NewOptions).
type Options struct {
	// Addr is the TCP address brokers and clients talk to. Default
	// "127.0.0.1:20880"; port 0 picks a free port (Server.Addr reports it).
	Addr string `yaml:"addr"`
	// HTTPAddr serves the admin API, the console, /metrics, /healthz and
	// /readyz. Default "127.0.0.1:8080"; port 0 picks a free port.
	HTTPAddr string `yaml:"http_addr"`
	// AdvertiseAddr is the TCP address other processes should use for this
	// server (listed under metaservers/). Default: Addr as bound.
	AdvertiseAddr string `yaml:"advertise_addr"`
	// EtcdEndpoints are the etcd client endpoints, host:port. Required by
	// New; the qmq-metaserver binary starts an embedded etcd under DataDir
	// and fills them in when the flag is empty.
	EtcdEndpoints []string `yaml:"etcd_endpoints"`
	// DataDir holds the embedded etcd's data (binary only). Default
	// "./data/metaserver".
	DataDir string `yaml:"data_dir"`
	// Prefix is the etcd key prefix all state lives under; it must start and
	// end with "/". Default "/qmq/".
	Prefix string `yaml:"prefix"`
	// BrokerTTL is the lease TTL of broker registrations: a broker that stops
	// heartbeating leaves the routes this long after its last heartbeat.
	// Brokers heartbeat every third of it. Default 10 s; at least 1 s (etcd
	// raises TTLs below 1.5 × its election timeout).
	BrokerTTL time.Duration `yaml:"broker_ttl"`
	// ClientTTL is the lease TTL of consumer registrations. Default 30 s
	// (the consumer timeout).
	ClientTTL time.Duration `yaml:"client_ttl"`
	// MinGroups is how many writable groups a new subject's route gets.
	// Default 2.
	MinGroups int `yaml:"min_groups"`
	// RequireAuth makes every request prove an identity: TCP commands
	// (but ping and auth) need an authenticated connection, and reads of
	// the admin API need an identity with admin read. Without it TCP
	// commands and admin reads are open; changes (admin write), message
	// bodies (read bodies), identity listings (admin read) and the policy
	// (brokers and admins) need an identity whatever this says. Default
	// false.
	RequireAuth bool `yaml:"auth"`
	// AdminToken is the secret of identity "admin" (admin write), given in
	// code (tests, embedding programs). The binary takes it from
	// QMQ_ADMIN_TOKEN or AdminTokenFile only: never from the command line
	// or the config file.
	AdminToken string `yaml:"-"`
	// AdminTokenFile holds the admin token (mode 0600 or stricter: a file
	// others can read is refused; at least 16 characters). When it does
	// not exist, the server generates a token and writes it there (0600)
	// and logs the path, never the token. Empty with no AdminToken: the
	// binary uses <data_dir>/admin-token; a library server makes a token
	// for the process only (Server.AdminToken).
	AdminTokenFile string `yaml:"admin_token_file"`
	// RemovedAdminToken refuses the admin_token key the config file once
	// had, saying what to use instead.
	RemovedAdminToken removedAdminToken `yaml:"admin_token,omitempty" json:"-"`
	// Credentials are what the meta server presents to brokers when it
	// relays an admin request (an admin identity). Empty: CredentialsFile,
	// else identity "admin" with the admin token.
	Credentials auth.Credentials `yaml:"-"`
	// CredentialsFile holds "name:secret" for Credentials (mode 0600 or
	// stricter). The binary also reads QMQ_CREDENTIALS.
	CredentialsFile string `yaml:"credentials_file"`
	// TLS names the meta server's certificate, key and CA (PEM files,
	// re-read when they change). With Cert and Key both listeners (TCP and
	// HTTP) serve TLS only; with CA the TCP port also takes client
	// certificates that CA signed as identities, and the relays to brokers
	// go over TLS verified against CA, presenting Cert (a certificate with
	// client use, as scripts/certs -node makes). The binary's embedded etcd
	// serves with the same files. Default: plaintext.
	TLS tlsconfig.Files `yaml:"tls"`
	// EtcdTLS names the files the meta server's etcd client uses (CA to
	// verify etcd, Cert and Key for etcd's client-certificate auth). The
	// binary's embedded etcd, when TLS is set and EtcdTLS is not, uses TLS's.
	// Default: plaintext.
	EtcdTLS tlsconfig.Files `yaml:"etcd_tls"`
	// Insecure lets a listener on a non-loopback address run without TLS
	// and RequireAuth (see pkg/exposure). Default false: such a server
	// refuses to start.
	Insecure bool `yaml:"insecure"`
	// Limits bound the TCP port's connections: connections in all and per
	// identity, bytes held in partial frames, idle timeout and minimum read
	// rate (pkg/secure Limits; zero fields take pkg/netserver's defaults:
	// 10,000, 1,000, 256 MiB, 10 min, 4 KiB/s over 20 s).
	Limits secure.Limits `yaml:"limits"`
	// EtcdTimeout bounds each etcd request. Default 3 s.
	EtcdTimeout time.Duration `yaml:"etcd_timeout"`
	// StartTimeout bounds how long Start waits for etcd: to load the view
	// and make sure identity admin holds the admin token (a slow or
	// starting etcd is retried until then). Default 30 s.
	StartTimeout time.Duration `yaml:"start_timeout"`
	// BrokerTimeout bounds each admin request relayed to a broker. Default 5 s.
	BrokerTimeout time.Duration `yaml:"broker_timeout"`
	// HistoryInterval is how often the server samples the cluster's rates,
	// backlog and delay pending for the console's charts of the last hour
	// (history.go). Default (and when 0) 10 s.
	HistoryInterval time.Duration `yaml:"history_interval"`
	// Log chooses the binary's logger.
	Log logging.Options `yaml:"log"`
}

// NewOptions returns the defaults.
func NewOptions() Options {
	return Options{
		Addr:            "127.0.0.1:20880",    // QMQ's meta server port
		HTTPAddr:        "127.0.0.1:8080",     // QMQ's meta server HTTP port
		DataDir:         "./data/metaserver",  // embedded etcd data
		Prefix:          "/qmq/",              // every key lives under it
		BrokerTTL:       10 * time.Second,     // a dead broker leaves routes within 10 s
		ClientTTL:       30 * time.Second,     // the consumer timeout
		MinGroups:       2,                    // groups per new route
		EtcdTimeout:     3 * time.Second,      // per etcd request
		StartTimeout:    30 * time.Second,     // Start's wait for etcd
		BrokerTimeout:   5 * time.Second,      // per relayed admin request
		HistoryInterval: 10 * time.Second,     // console history samples
		Log:             logging.NewOptions(), // info, JSON
	}
}

// AddFlags binds the options to fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Addr, "addr", o.Addr, "TCP address for brokers and clients")
	fs.StringVar(&o.HTTPAddr, "http-addr", o.HTTPAddr, "HTTP address for the admin API, console and metrics")
	fs.StringVar(&o.AdvertiseAddr, "advertise-addr", o.AdvertiseAddr, "TCP address others should use (default: --addr as bound)")
	fs.Var(listFlag{&o.EtcdEndpoints}, "etcd-endpoints", "comma-separated external etcd endpoints (default: an embedded etcd under --data-dir)")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "embedded etcd data directory")
	fs.StringVar(&o.Prefix, "prefix", o.Prefix, "etcd key prefix")
	fs.DurationVar(&o.BrokerTTL, "broker-ttl", o.BrokerTTL, "lease TTL of broker registrations")
	fs.DurationVar(&o.ClientTTL, "client-ttl", o.ClientTTL, "lease TTL of consumer registrations")
	fs.IntVar(&o.MinGroups, "min-groups", o.MinGroups, "broker groups a new subject's route gets")
	fs.BoolVar(&o.RequireAuth, "auth", o.RequireAuth, "require an identity for every TCP command and admin read (changes, bodies and identities always need one)")
	fs.StringVar(&o.AdminTokenFile, "admin-token-file", o.AdminTokenFile, "file holding the admin token, mode 0600; generated there when missing (default <data-dir>/admin-token; env "+EnvAdminToken+" instead)")
	fs.StringVar(&o.CredentialsFile, "credentials-file", o.CredentialsFile, "file holding name:secret the meta server presents to brokers, mode 0600 (env "+EnvCredentials+"; default identity admin)")
	fs.Func("admin-token", "removed: a token on the command line shows in ps; use --admin-token-file or "+EnvAdminToken, func(string) error {
		return errRemovedAdminToken
	})
	o.TLS.AddFlags(fs, "tls-", "the meta server's")
	o.EtcdTLS.AddFlags(fs, "etcd-tls-", "the meta server's etcd client")
	fs.BoolVar(&o.Insecure, "insecure", o.Insecure, "listen on a non-loopback address without TLS and --auth (anyone who reaches the port may use it)")
	o.Limits.AddFlags(fs)
	fs.DurationVar(&o.EtcdTimeout, "etcd-timeout", o.EtcdTimeout, "timeout of each etcd request")
	fs.DurationVar(&o.StartTimeout, "start-timeout", o.StartTimeout, "how long start-up waits for etcd")
	fs.DurationVar(&o.BrokerTimeout, "broker-timeout", o.BrokerTimeout, "timeout of each admin request relayed to a broker")
	o.Log.AddFlags(fs)
}

// Environment variables the binary reads secrets from.
const (
	// EnvAdminToken holds the admin token (instead of AdminTokenFile).
	EnvAdminToken = "QMQ_ADMIN_TOKEN"
	// EnvCredentials holds "name:secret" (instead of CredentialsFile).
	EnvCredentials = "QMQ_CREDENTIALS"
)

// errRemovedAdminToken says where the admin token comes from now.
var errRemovedAdminToken = fmt.Errorf("%w: the admin token is no longer taken from the command line or the config file's admin-token "+
	"(it shows in ps and in files others read): put it in a file only you can read and pass --admin-token-file FILE "+
	"(admin-token-file in the config file), or set %s", ErrInvalidOptions, EnvAdminToken)

// RefuseSecretArgs fails when args pass the admin token on the command
// line (--admin-token, removed), with a message that says what to use and
// does not repeat the token: the binary calls it before parsing flags,
// whose own error would quote the value.
func RefuseSecretArgs(args []string) error {
	for _, a := range args {
		if a == "--" {
			return nil
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "admin-token" {
			return errRemovedAdminToken
		}
	}
	return nil
}

// removedAdminToken is a config key that was removed: decoding one fails
// with errRemovedAdminToken.
type removedAdminToken struct{}

// UnmarshalText refuses the key.
func (removedAdminToken) UnmarshalText([]byte) error { return errRemovedAdminToken }

// FromEnvironment takes secrets from the environment (getenv is
// os.Getenv in the binary): EnvAdminToken unless AdminToken is set, and
// EnvCredentials unless Credentials are. An admin token from the
// environment must be at least auth.MinSecretLen characters.
func (o *Options) FromEnvironment(getenv func(string) string) error {
	if v := strings.TrimSpace(getenv(EnvAdminToken)); v != "" && o.AdminToken == "" {
		if err := auth.CheckSecret(v); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalidOptions, EnvAdminToken, err)
		}
		o.AdminToken = v
	}
	if v := getenv(EnvCredentials); v != "" && o.Credentials == (auth.Credentials{}) {
		c, err := auth.ParseCredentials(v)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalidOptions, EnvCredentials, err)
		}
		o.Credentials = c
	}
	return nil
}

// ErrInvalidOptions wraps every Validate failure.
var ErrInvalidOptions = errors.New("metaserver: invalid options")

// Validate reports the first setting that cannot work, naming it.
func (o *Options) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	switch {
	case o.Addr == "":
		return bad("addr is empty")
	case o.HTTPAddr == "":
		return bad("http_addr is empty")
	case len(o.Prefix) < 2 || !strings.HasPrefix(o.Prefix, "/") || !strings.HasSuffix(o.Prefix, "/"):
		return bad("prefix %q must start and end with / and name something", o.Prefix)
	case o.BrokerTTL < time.Second:
		return bad("broker_ttl %v is under 1s", o.BrokerTTL)
	case o.ClientTTL < time.Second:
		return bad("client_ttl %v is under 1s", o.ClientTTL)
	case o.MinGroups < 1:
		return bad("min_groups %d is under 1", o.MinGroups)
	case o.EtcdTimeout <= 0:
		return bad("etcd_timeout %v must be positive", o.EtcdTimeout)
	case o.StartTimeout <= 0:
		return bad("start_timeout %v must be positive", o.StartTimeout)
	case o.HistoryInterval < 0:
		return bad("history_interval %v is negative", o.HistoryInterval)
	case o.BrokerTimeout <= 0:
		return bad("broker_timeout %v must be positive", o.BrokerTimeout)
	}
	if err := o.TLS.Validate(); err != nil {
		return bad("tls: %v", err)
	}
	if err := o.EtcdTLS.Validate(); err != nil {
		return bad("etcd_tls: %v", err)
	}
	if err := o.Limits.Validate(); err != nil {
		return bad("limits: %v", err)
	}
	tlsOn := o.TLS.Cert != ""
	for _, a := range []string{o.Addr, o.HTTPAddr} {
		if err := exposure.Check(a, tlsOn, o.RequireAuth, o.Insecure); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
		}
	}
	// The meta server registers its TCP address (and its HTTP address,
	// on the advertised host when bound to a wildcard) in etcd.
	if err := exposure.CheckAdvertise(o.Addr, o.AdvertiseAddr, "--advertise-addr"); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return o.Log.Validate()
}

// listFlag is a comma-separated list flag whose String gives the list back
// (--help shows the default through String).
type listFlag struct{ p *[]string }

func (l listFlag) String() string {
	if l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

func (l listFlag) Set(s string) error {
	*l.p = nil
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			*l.p = append(*l.p, e)
		}
	}
	return nil
}

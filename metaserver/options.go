package metaserver

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/qmq-go/qmq/pkg/logging"
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
	// AdminToken is the bearer token admin changes require. Empty: New
	// generates a random one and logs it at warn level.
	AdminToken string `yaml:"admin_token"`
	// EtcdTimeout bounds each etcd request. Default 3 s.
	EtcdTimeout time.Duration `yaml:"etcd_timeout"`
	// BrokerTimeout bounds each admin request relayed to a broker. Default 5 s.
	BrokerTimeout time.Duration `yaml:"broker_timeout"`
	// Log chooses the binary's logger.
	Log logging.Options `yaml:"log"`
}

// NewOptions returns the defaults.
func NewOptions() Options {
	return Options{
		Addr:          "127.0.0.1:20880",    // QMQ's meta server port
		HTTPAddr:      "127.0.0.1:8080",     // QMQ's meta server HTTP port
		DataDir:       "./data/metaserver",  // embedded etcd data
		Prefix:        "/qmq/",              // every key lives under it
		BrokerTTL:     10 * time.Second,     // a dead broker leaves routes within 10 s
		ClientTTL:     30 * time.Second,     // the consumer timeout
		MinGroups:     2,                    // groups per new route
		EtcdTimeout:   3 * time.Second,      // per etcd request
		BrokerTimeout: 5 * time.Second,      // per relayed admin request
		Log:           logging.NewOptions(), // info, JSON
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
	fs.StringVar(&o.AdminToken, "admin-token", o.AdminToken, "bearer token for admin changes (default: random, logged)")
	fs.DurationVar(&o.EtcdTimeout, "etcd-timeout", o.EtcdTimeout, "timeout of each etcd request")
	fs.DurationVar(&o.BrokerTimeout, "broker-timeout", o.BrokerTimeout, "timeout of each admin request relayed to a broker")
	o.Log.AddFlags(fs)
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
	case o.BrokerTimeout <= 0:
		return bad("broker_timeout %v must be positive", o.BrokerTimeout)
	}
	return o.Log.Validate()
}

// listFlag is a comma-separated list flag whose String gives the list back
// (config.Parse replays flags through String after loading a file).
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

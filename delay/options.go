package delay

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/qmq-go/qmq/delay/store"
	"github.com/qmq-go/qmq/pkg/config"
	"github.com/qmq-go/qmq/pkg/logging"
)

// Options configure a Server. Start from NewOptions.
type Options struct {
	// Group is the delay group this server serves (default "dl1").
	Group string `yaml:"group"`
	// Addr is the TCP address for producers (default "127.0.0.1:20801").
	Addr string `yaml:"addr"`
	// HTTPAddr serves /metrics, /healthz and /readyz (default
	// "127.0.0.1:20811"; empty disables it).
	HTTPAddr string `yaml:"http_addr"`
	// AdvertiseAddr is the address registered with the meta server
	// (default: the listen address).
	AdvertiseAddr string `yaml:"advertise_addr"`
	// DataDir holds the store (default "./data/delay").
	DataDir string `yaml:"data_dir"`
	// Flush is "sync" (default: fsync before the ack, group commit) or
	// "async".
	Flush string `yaml:"flush"`
	// FlushInterval is the fsync interval under async flush (default 100ms).
	FlushInterval time.Duration `yaml:"flush_interval"`
	// Window is how far ahead messages are loaded into the wheel (default 30m).
	Window time.Duration `yaml:"window"`
	// Horizon is how far ahead a message may be due (default 2 years, 731
	// days); further is refused with StatusBeyondHorizon.
	Horizon time.Duration `yaml:"horizon"`
	// Keep is how long the files of a fully dispatched hour stay (default 24h).
	Keep time.Duration `yaml:"keep"`
	// MetaServers are meta server addresses: the server registers with them
	// and looks up the realtime groups of the subjects it forwards.
	MetaServers []string `yaml:"meta_servers"`
	// Realtime are fixed realtime broker addresses to forward to, for setups
	// without a meta server.
	Realtime []string `yaml:"realtime"`
	// ForwardInFlight bounds the send requests in flight per realtime group
	// (default 16).
	ForwardInFlight int `yaml:"forward_in_flight"`
	// MaxBody bounds a message body (default 4 MiB).
	MaxBody int `yaml:"max_body"`
	// MaxFrameSize bounds a request (default 16 MiB).
	MaxFrameSize int `yaml:"max_frame_size"`
	// ShutdownTimeout bounds a graceful shutdown (default 10s).
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`

	Log logging.Options `yaml:"log"`
}

// NewOptions returns the defaults.
func NewOptions() Options {
	return Options{
		Group:           "dl1",
		Addr:            "127.0.0.1:20801",
		HTTPAddr:        "127.0.0.1:20811",
		DataDir:         "./data/delay",
		Flush:           "sync",
		FlushInterval:   100 * time.Millisecond,
		Window:          30 * time.Minute,
		Horizon:         store.DefaultHorizon,
		Keep:            24 * time.Hour,
		ForwardInFlight: 16,
		MaxBody:         4 << 20,
		MaxFrameSize:    16 << 20,
		ShutdownTimeout: 10 * time.Second,
		Log:             logging.NewOptions(),
	}
}

// AddFlags binds the options to command-line flags.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Group, "group", o.Group, "delay group name")
	fs.StringVar(&o.Addr, "addr", o.Addr, "TCP address for producers")
	fs.StringVar(&o.HTTPAddr, "http-addr", o.HTTPAddr, "HTTP address for /metrics, /healthz, /readyz (empty: off)")
	fs.StringVar(&o.AdvertiseAddr, "advertise-addr", o.AdvertiseAddr, "address registered with the meta server")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "data directory")
	fs.StringVar(&o.Flush, "flush", o.Flush, "durability: sync (fsync before ack, group commit) or async")
	fs.DurationVar(&o.FlushInterval, "flush-interval", o.FlushInterval, "fsync interval under --flush=async")
	fs.DurationVar(&o.Window, "window", o.Window, "how far ahead messages are loaded into the wheel")
	fs.DurationVar(&o.Horizon, "horizon", o.Horizon, "how far ahead a message may be due")
	fs.DurationVar(&o.Keep, "keep", o.Keep, "how long dispatched hours are kept")
	config.StringList(fs, &o.MetaServers, "meta", "meta server addresses (comma-separated or repeated)")
	config.StringList(fs, &o.Realtime, "realtime", "fixed realtime broker addresses to forward to, without a meta server (comma-separated or repeated)")
	fs.IntVar(&o.MaxBody, "max-body", o.MaxBody, "largest message body in bytes")
	o.Log.AddFlags(fs)
}

// Validate reports the first setting that cannot work.
func (o *Options) Validate() error {
	switch {
	case o.Group == "" || strings.ContainsAny(o.Group, "/% \t"):
		return fmt.Errorf("delay: group %q must be a name of [A-Za-z0-9._-]", o.Group)
	case o.Addr == "":
		return fmt.Errorf("delay: addr must be set")
	case o.DataDir == "":
		return fmt.Errorf("delay: data dir must be set")
	case o.Flush != string(store.FlushSync) && o.Flush != string(store.FlushAsync):
		return fmt.Errorf("delay: flush must be sync or async, got %q", o.Flush)
	case o.Window <= 0 || o.Horizon <= 0 || o.Keep < 0 || o.FlushInterval <= 0:
		return fmt.Errorf("delay: window, horizon and flush interval must be positive, keep not negative")
	case len(o.MetaServers) == 0 && len(o.Realtime) == 0:
		return fmt.Errorf("delay: give --meta or --realtime: the server needs to know where to forward due messages")
	case o.ForwardInFlight <= 0:
		return fmt.Errorf("delay: forward in flight must be positive")
	case o.MaxBody <= 0 || o.MaxFrameSize <= o.MaxBody:
		return fmt.Errorf("delay: max body must be positive and below max frame size")
	case o.ShutdownTimeout <= 0:
		return fmt.Errorf("delay: shutdown timeout must be positive")
	}
	return o.Log.Validate()
}

package delay

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/qmq-go/qmq/delay/store"
	"github.com/qmq-go/qmq/pkg/config"
	"github.com/qmq-go/qmq/pkg/exposure"
	"github.com/qmq-go/qmq/pkg/failover"
	"github.com/qmq-go/qmq/pkg/logging"
	"github.com/qmq-go/qmq/pkg/secure"
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
	// (default 64: a second's 10,000 occurrences of recurring schedules are
	// 40 requests of 256, all in flight at once; NOTES.md).
	ForwardInFlight int `yaml:"forward_in_flight"`
	// MaxBody bounds a message body (default 4 MiB).
	MaxBody int `yaml:"max_body"`
	// MaxFrameSize bounds a request (default 16 MiB).
	MaxFrameSize int `yaml:"max_frame_size"`
	// ShutdownTimeout bounds a graceful shutdown (default 10s).
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`

	// Role is "master" (default) or "slave": a slave copies its master's
	// hour files, refuses sends, and (with meta servers and Failover) takes
	// over when the master's registration expires.
	Role string `yaml:"role"`
	// Master is the master's address a slave copies from (default: the
	// group's master as the meta servers name it).
	Master string `yaml:"master"`
	// BrokerID names this server to the meta servers, stable across
	// restarts (default: the advertised address).
	BrokerID string `yaml:"broker_id"`
	// Failover lets the group's role loop (pkg/failover) change the role:
	// the eligible slave takes the group over when its master is gone, a
	// deposed master rejoins as the slave (default true; needs meta
	// servers). Without it the roles are fixed.
	Failover bool `yaml:"failover"`
	// SuspectAfter is how long a silent peer is suspected gone (failover):
	// a slave whose master has not answered for it asks to take the group
	// over (--wait-slave), a master whose slave has not asked drops it from
	// the eligible set (default 1s). SlaveDown is a --wait-slave master's
	// policy when its eligible slave is gone: "alone" (default) or
	// "readonly".
	SuspectAfter time.Duration `yaml:"suspect_after"`
	SlaveDown    string        `yaml:"slave_down"`
	// WaitSlave makes a send's reply wait until the slave holds the
	// messages (default false).
	WaitSlave bool `yaml:"wait_slave"`
	// TracerProvider, when set, records spans for messages that carry a
	// trace context (pkg/tracing): "schedule <subject>" from a send's
	// arrival to the durable append, and "forward <subject>" from the
	// message's firing to a realtime broker's ack. nil (the default): off.
	// qmq-delay sets it from the OTEL_* variables (pkg/tracing/otlp).
	TracerProvider trace.TracerProvider `yaml:"-"`
	// SlaveLagReadonly: with WaitSlave, a slave lagging longer than this
	// makes the master readonly (waiting replies and new sends get
	// StatusReadonly, the meta server hears GroupReadonly) until it has
	// caught up (default 3s).
	SlaveLagReadonly time.Duration `yaml:"slave_lag_readonly"`
	// MaxWaitingAcks bounds the send replies waiting for the slave; more
	// sends get StatusBusy (default 4096).
	MaxWaitingAcks int `yaml:"max_waiting_acks"`
	// SyncWait is how long a master holds a slave's manifest request when
	// nothing changed (default 1s).
	SyncWait time.Duration `yaml:"sync_wait"`
	// SyncMaxBytes bounds the file bytes of one read answer (default 4 MiB).
	SyncMaxBytes int `yaml:"sync_max_bytes"`

	Log logging.Options `yaml:"log"`
	// Secure holds TLS, identities, the exposure rule and the TCP port's
	// connection bounds (pkg/secure; its keys sit at the top level of the
	// config file: tls, auth, insecure, credentials_file, limits).
	Secure secure.Options `yaml:",inline"`
}

// Roles of a delay server in its group (Options.Role).
const (
	RoleMaster = "master"
	RoleSlave  = "slave"
)

// NewOptions returns the defaults.
func NewOptions() Options {
	return Options{
		Group:            "dl1",
		Addr:             "127.0.0.1:20801",
		HTTPAddr:         "127.0.0.1:20811",
		DataDir:          "./data/delay",
		Flush:            "sync",
		FlushInterval:    100 * time.Millisecond,
		Window:           30 * time.Minute,
		Horizon:          store.DefaultHorizon,
		Keep:             24 * time.Hour,
		ForwardInFlight:  64,
		MaxBody:          4 << 20,
		MaxFrameSize:     16 << 20,
		ShutdownTimeout:  10 * time.Second,
		Role:             RoleMaster,
		Failover:         true,
		SuspectAfter:     time.Second,
		SlaveDown:        failover.SlaveDownAlone,
		SlaveLagReadonly: 3 * time.Second,
		MaxWaitingAcks:   4096,
		SyncWait:         time.Second,
		SyncMaxBytes:     4 << 20,
		Log:              logging.NewOptions(),
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
	fs.IntVar(&o.ForwardInFlight, "forward-in-flight", o.ForwardInFlight, "send requests in flight per realtime group while forwarding due messages")
	config.StringList(fs, &o.Realtime, "realtime", "fixed realtime broker addresses to forward to, without a meta server (comma-separated or repeated)")
	fs.IntVar(&o.MaxBody, "max-body", o.MaxBody, "largest message body in bytes")
	fs.StringVar(&o.Role, "role", o.Role, "master or slave")
	fs.StringVar(&o.Master, "master", o.Master, "a slave's master address (default: the master the meta servers name)")
	fs.StringVar(&o.BrokerID, "broker-id", o.BrokerID, "stable name of this server for the meta servers (default: the advertised address)")
	fs.BoolVar(&o.Failover, "failover", o.Failover, "roles follow the group's election (pkg/failover); off: fixed roles")
	fs.DurationVar(&o.SuspectAfter, "suspect-after", o.SuspectAfter, "failover: how long a silent master (or slave) is suspected gone")
	fs.StringVar(&o.SlaveDown, "slave-down", o.SlaveDown, "with --wait-slave: when the eligible slave is gone, alone (drop it from the eligible set and serve alone) or readonly")
	fs.BoolVar(&o.WaitSlave, "wait-slave", o.WaitSlave, "a send's reply waits for the slave's copy")
	fs.DurationVar(&o.SlaveLagReadonly, "slave-lag-readonly", o.SlaveLagReadonly, "with --wait-slave: slave lag that makes the master readonly")
	fs.IntVar(&o.MaxWaitingAcks, "max-waiting-acks", o.MaxWaitingAcks, "send replies that may wait for the slave; more sends get busy")
	o.Log.AddFlags(fs)
	o.Secure.AddFlags(fs)
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
	case o.Role != RoleMaster && o.Role != RoleSlave:
		return fmt.Errorf("delay: role must be %q or %q, got %q", RoleMaster, RoleSlave, o.Role)
	case o.Role == RoleSlave && o.Master == "" && len(o.MetaServers) == 0:
		return fmt.Errorf("delay: a slave needs --master or --meta to find its master")
	case o.SuspectAfter < 100*time.Millisecond || o.SlaveLagReadonly <= 0 || o.SyncWait <= 0:
		return fmt.Errorf("delay: suspect after (at least 100ms), slave lag readonly and sync wait must be positive")
	case o.SlaveDown != failover.SlaveDownAlone && o.SlaveDown != failover.SlaveDownReadonly:
		return fmt.Errorf("delay: slave down must be %q or %q, got %q", failover.SlaveDownAlone, failover.SlaveDownReadonly, o.SlaveDown)
	case o.MaxWaitingAcks <= 0 || o.SyncMaxBytes <= 0:
		return fmt.Errorf("delay: max waiting acks and sync max bytes must be positive")
	}
	if err := o.Secure.Validate(o.Addr, o.HTTPAddr); err != nil {
		return fmt.Errorf("delay: %w", err)
	}
	if len(o.MetaServers) > 0 {
		// The registered address is where clients and the group's other
		// server connect: never a wildcard.
		if err := exposure.CheckAdvertise(o.Addr, o.AdvertiseAddr, "--advertise-addr"); err != nil {
			return fmt.Errorf("delay: %w", err)
		}
	}
	return o.Log.Validate()
}

// slaveLease is the slave lease of async failover: a constant of
// pkg/failover, so master and slave always agree on it.
func (o *Options) slaveLease() time.Duration { return failover.NewOptions().SlaveLease }

// syncWait is how long a master may hold a manifest request: SyncWait, at
// most half of SuspectAfter (a slave hears from its master that often, or
// suspects it).
func (o *Options) syncWait() time.Duration { return min(o.SyncWait, o.SuspectAfter/2) }

package realtime

import (
	"go.opentelemetry.io/otel/trace"

	"flag"
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/config"
	"github.com/qmq-go/qmq/pkg/exposure"
	"github.com/qmq-go/qmq/pkg/failover"
	"github.com/qmq-go/qmq/pkg/logging"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/secure"
	"github.com/qmq-go/qmq/realtime/store"
)

// Options configure a Broker. NewOptions holds every default; zero values
// are not defaults, so start from NewOptions.
type Options struct {
	// Group is the broker group this broker serves (default "rt1").
	Group string `yaml:"group"`
	// Addr is the TCP address for clients (default "127.0.0.1:20881"; port 0
	// picks a free port).
	Addr string `yaml:"addr"`
	// HTTPAddr serves /metrics, /healthz and /readyz (default
	// "127.0.0.1:20891"; empty disables it).
	HTTPAddr string `yaml:"http_addr"`
	// AdvertiseAddr is the address registered with the meta server (default:
	// the address the broker listens on).
	AdvertiseAddr string `yaml:"advertise_addr"`
	// DataDir holds the store (default "./data/realtime").
	DataDir string `yaml:"data_dir"`
	// Flush is the durability policy: "sync" (default: fsync before the ack,
	// with group commit) or "async" (ack from the page cache, fsync every
	// FlushInterval).
	Flush string `yaml:"flush"`
	// FlushInterval is the fsync interval under async flush (default 200ms).
	FlushInterval time.Duration `yaml:"flush_interval"`
	// MetaServers are meta server addresses to register with; empty runs the
	// broker standalone (clients then use static addresses).
	MetaServers []string `yaml:"meta_servers"`
	// HeartbeatInterval is how often the broker heartbeats to the meta
	// server (default 2s).
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`

	// DedupeWindow is how long a message id is remembered so that a resent
	// copy (same subject, id and attempt count) is not stored twice
	// (default 10m). DedupeCapacity bounds the ids remembered (default
	// 1,000,000, a fixed 32 MB): past it the window is shorter — at
	// 500,000 messages a second it still covers a producer's retries and a
	// delay server's re-forwards, which come within seconds.
	DedupeWindow   time.Duration `yaml:"dedupe_window"`
	DedupeCapacity int           `yaml:"dedupe_capacity"`

	// PullWorkers is the number of goroutines serving pull actors (default
	// 4 × GOMAXPROCS); TimeSlice is how long one actor may run before it
	// yields (default 5ms).
	PullWorkers int           `yaml:"pull_workers"`
	TimeSlice   time.Duration `yaml:"time_slice"`
	// FairShare holds the pulls of a consumer group that takes more than its
	// share of deliveries while other groups drain backlogs (fairshare.go).
	FairShare FairShareOptions `yaml:"fair_share"`
	// InlinePulls serves a pull on the event loop that read it when its
	// actor is idle, instead of handing it to a pull worker and its answer
	// back to the loop (default true; see "Inline pulls" in doc.go). An
	// inline pull that read from the disk (its messages were not in the
	// page cache) or took longer than 20ms sends its group's pulls to the
	// workers for a second.
	InlinePulls bool `yaml:"inline_pulls"`
	// MaxPullWait caps how long a pull may wait for messages (default 30s).
	MaxPullWait time.Duration `yaml:"max_pull_wait"`
	// PullGrace is how long past its wait a pull may sit in its actor's
	// mailbox before it is dropped with a retry-later status (default 2s).
	PullGrace time.Duration `yaml:"pull_grace"`
	// MaxPullMessages caps one pull's batch (default 1000).
	MaxPullMessages int `yaml:"max_pull_messages"`
	// ConsumerTimeout: a consumer that neither pulls nor acks for this long
	// loses its un-acked messages to the rest of its group (default 30s).
	ConsumerTimeout time.Duration `yaml:"consumer_timeout"`
	// RetryDelay is when a message whose ack was lost becomes due again on
	// the retry subject (default 5s).
	RetryDelay time.Duration `yaml:"retry_delay"`

	// Retention of the message log (defaults 72h and no size limit).
	RetentionAge   time.Duration `yaml:"retention_age"`
	RetentionBytes int64         `yaml:"retention_bytes"`
	// SegmentSize is the size of message-log segments (default 1 GiB).
	SegmentSize int64 `yaml:"segment_size"`
	// ZeroFillAhead is how far ahead of its end the message log is kept
	// written with zeros under the durable flush (default 16 MiB; negative:
	// off; store.Options.ZeroFillAhead, store doc.go "Zero filling").
	ZeroFillAhead int64 `yaml:"zero_fill_ahead"`
	// PageCacheWindow is how much of the message log's newest durable bytes
	// stays in the page cache; older bytes are dropped from it (default 1
	// GiB; negative: the kernel decides; store.Options.PageCacheWindow,
	// store doc.go "Page cache").
	PageCacheWindow int64 `yaml:"page_cache_window"`
	// SlavePageCacheWindow is PageCacheWindow while the broker is a slave
	// (default 64 MiB; negative: the kernel decides): no consumer reads a
	// slave's log before it is promoted, when the window widens.
	SlavePageCacheWindow int64 `yaml:"slave_page_cache_window"`
	// NoMessageIndex turns off the index of stored messages by id and key
	// (store.Options.NoMessageIndex; on by default): CmdFindMessages then
	// answers StatusUnknownCommand.
	NoMessageIndex bool `yaml:"no_message_index"`
	// TracerProvider, when set, records a "store <subject>" span for every
	// stored message that carries a trace context (pkg/tracing), from the
	// request's arrival to the durable append. nil (the default): off.
	// qmq-realtime sets it from the OTEL_* variables
	// (otlp.FromEnvironment (pkg/tracing/otlp)).
	TracerProvider trace.TracerProvider `yaml:"-"`

	// MaxFrameSize bounds a request (default 16 MiB).
	MaxFrameSize int `yaml:"max_frame_size"`
	// Spin is how long the event loop, serving a single connection whose
	// requests it answered itself, polls it for the next request before it
	// sleeps (netserver Options.Spin: default 30µs, negative off, at most
	// 1ms).
	Spin time.Duration `yaml:"spin"`
	// MaxBody bounds a message body (default 4 MiB).
	MaxBody int `yaml:"max_body"`

	// ShutdownTimeout bounds a graceful shutdown (default 10s).
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`

	// Replication (see "Replication" in doc.go). Role is "master" (the
	// default) or "slave"; a slave copies Master's message and action logs
	// and refuses producers and consumers with StatusNotMaster. Without
	// Master a slave follows the group's master the meta servers name. A
	// Node with meta servers and no Master takes part in the group's
	// election: Role is then only the role it starts in (a master that is
	// refused the group starts as slave; a slave is promoted when its
	// master's lease expires).
	Role   string `yaml:"role"`
	Master string `yaml:"master"`
	// WaitSlave makes a send's reply wait until the slave has the messages
	// durably (default off: the reply waits for the master's disk only).
	// A slave that can be elected (meta servers, no Master) may set it for
	// when it is the master.
	WaitSlave bool `yaml:"wait_slave"`
	// SlaveLagReadonly: with WaitSlave, once the oldest committed bytes the
	// slave lacks are older than this (a slave that never connected lacks
	// everything sent) the master answers waiting and new sends readonly and
	// reports itself readonly to the meta server until the slave catches up
	// (default 5s).
	SlaveLagReadonly time.Duration `yaml:"slave_lag_readonly"`
	// MaxWaitingAcks bounds the send replies waiting for the slave; past it
	// sends get StatusBusy (default 10,000).
	MaxWaitingAcks int `yaml:"max_waiting_acks"`
	// SyncMaxBytes bounds each log's bytes in one sync response (default
	// 1 MiB); SyncWait is how long a master holds a sync request when it
	// has nothing new (default 500ms).
	SyncMaxBytes int           `yaml:"sync_max_bytes"`
	SyncWait     time.Duration `yaml:"sync_wait"`
	// Failover (pkg/failover; with meta servers and no fixed Master).
	// SuspectAfter is how long a silent peer is suspected gone: a slave
	// whose master has not answered for it asks to take the group over
	// (--wait-slave), a master whose slave has not asked drops it from the
	// eligible set; a broken connection is suspected at once (default 1s).
	// SlaveDown is what a --wait-slave master does when its eligible slave
	// is gone: "alone" (default: it removes the slave from the eligible
	// set and serves alone, readonly while it cannot) or "readonly".
	SuspectAfter time.Duration `yaml:"suspect_after"`
	SlaveDown    string        `yaml:"slave_down"`

	Log logging.Options `yaml:"log"`
	// Secure holds TLS, identities, the exposure rule and the TCP port's
	// connection bounds (pkg/secure; its keys sit at the top level of the
	// config file: tls, auth, insecure, credentials_file, limits).
	Secure secure.Options `yaml:",inline"`
}

// NewOptions returns the defaults.
func NewOptions() Options {
	return Options{
		Group:                "rt1",
		Addr:                 "127.0.0.1:20881",
		HTTPAddr:             "127.0.0.1:20891",
		DataDir:              "./data/realtime",
		Flush:                "sync",
		FlushInterval:        200 * time.Millisecond,
		HeartbeatInterval:    2 * time.Second,
		DedupeWindow:         10 * time.Minute,
		DedupeCapacity:       1_000_000,
		TimeSlice:            5 * time.Millisecond,
		FairShare:            NewFairShareOptions(),
		InlinePulls:          true,
		MaxPullWait:          30 * time.Second,
		PullGrace:            2 * time.Second,
		MaxPullMessages:      1000,
		ConsumerTimeout:      30 * time.Second,
		RetryDelay:           5 * time.Second,
		RetentionAge:         72 * time.Hour,
		SegmentSize:          1 << 30,
		ZeroFillAhead:        16 << 20,
		PageCacheWindow:      1 << 30,
		SlavePageCacheWindow: 64 << 20,
		MaxFrameSize:         16 << 20,
		Spin:                 netserver.DefaultSpin,
		MaxBody:              4 << 20,
		ShutdownTimeout:      10 * time.Second,
		Role:                 RoleMaster,
		SlaveLagReadonly:     5 * time.Second,
		MaxWaitingAcks:       10_000,
		SyncMaxBytes:         1 << 20,
		SyncWait:             500 * time.Millisecond,
		SuspectAfter:         time.Second,
		SlaveDown:            failover.SlaveDownAlone,
		Log:                  logging.NewOptions(),
	}
}

// AddFlags binds the options to command-line flags.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Group, "group", o.Group, "broker group name")
	fs.StringVar(&o.Addr, "addr", o.Addr, "TCP address for clients")
	fs.StringVar(&o.HTTPAddr, "http-addr", o.HTTPAddr, "HTTP address for /metrics, /healthz, /readyz (empty: off)")
	fs.StringVar(&o.AdvertiseAddr, "advertise-addr", o.AdvertiseAddr, "address registered with the meta server (default: the listen address)")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "data directory")
	fs.StringVar(&o.Flush, "flush", o.Flush, "durability: sync (fsync before ack, group commit) or async")
	fs.DurationVar(&o.FlushInterval, "flush-interval", o.FlushInterval, "fsync interval under --flush=async")
	config.StringList(fs, &o.MetaServers, "meta", "meta server addresses (comma-separated or repeated)")
	fs.DurationVar(&o.HeartbeatInterval, "heartbeat-interval", o.HeartbeatInterval, "heartbeat interval to the meta server")
	fs.DurationVar(&o.DedupeWindow, "dedupe-window", o.DedupeWindow, "how long message ids are remembered to drop resent copies")
	fs.IntVar(&o.DedupeCapacity, "dedupe-capacity", o.DedupeCapacity, "most message ids remembered")
	fs.IntVar(&o.PullWorkers, "pull-workers", o.PullWorkers, "goroutines serving pulls (0: 4 × cores)")
	fs.DurationVar(&o.TimeSlice, "time-slice", o.TimeSlice, "how long one consumer group's actor runs before yielding")
	o.FairShare.AddFlags(fs)
	fs.BoolVar(&o.InlinePulls, "inline-pulls", o.InlinePulls, "serve a pull on the event loop when its consumer group's actor is idle")
	fs.DurationVar(&o.ConsumerTimeout, "consumer-timeout", o.ConsumerTimeout, "silence after which a consumer's un-acked messages go back to its group")
	fs.DurationVar(&o.RetentionAge, "retention-age", o.RetentionAge, "delete message-log segments older than this (negative: keep)")
	fs.Int64Var(&o.RetentionBytes, "retention-bytes", o.RetentionBytes, "delete the oldest segments past this total size (0: no limit)")
	fs.Int64Var(&o.SegmentSize, "segment-size", o.SegmentSize, "message-log segment size in bytes")
	fs.Int64Var(&o.PageCacheWindow, "page-cache-window", o.PageCacheWindow, "bytes of the message log's newest durable data kept in the page cache; older data is dropped from it, so writes reuse memory (negative: leave it to the kernel)")
	fs.Int64Var(&o.SlavePageCacheWindow, "slave-page-cache-window", o.SlavePageCacheWindow, "--page-cache-window while the broker is a slave, whose log no consumer reads until it is promoted (negative: leave it to the kernel)")
	fs.Int64Var(&o.ZeroFillAhead, "zero-fill-ahead", o.ZeroFillAhead, "bytes of the message log kept written with zeros ahead of its end under durable flush, so syncs overwrite written blocks (negative: off)")
	fs.BoolVar(&o.NoMessageIndex, "no-message-index", o.NoMessageIndex, "keep no index of messages by id and key (lookups and traces then find nothing on this broker)")
	fs.IntVar(&o.MaxBody, "max-body", o.MaxBody, "largest message body in bytes")
	fs.DurationVar(&o.Spin, "spin", o.Spin, "how long the event loop polls a lone connection for its next request before sleeping (negative: off; at most 1ms)")
	fs.StringVar(&o.Role, "role", o.Role, "replication role: master or slave (with --meta and no --master, the role to start in: roles then follow the group's election)")
	fs.StringVar(&o.Master, "master", o.Master, "the master's address (role slave; default: the master the meta servers name)")
	fs.BoolVar(&o.WaitSlave, "wait-slave", o.WaitSlave, "send replies wait until the slave has the messages")
	fs.DurationVar(&o.SlaveLagReadonly, "slave-lag-readonly", o.SlaveLagReadonly, "with --wait-slave: readonly once the slave lags this long")
	fs.IntVar(&o.MaxWaitingAcks, "max-waiting-acks", o.MaxWaitingAcks, "with --wait-slave: most send replies waiting for the slave (then busy)")
	fs.IntVar(&o.SyncMaxBytes, "sync-max-bytes", o.SyncMaxBytes, "most bytes of each log in one sync response")
	fs.DurationVar(&o.SyncWait, "sync-wait", o.SyncWait, "how long a master holds a sync request with nothing new")
	fs.DurationVar(&o.SuspectAfter, "suspect-after", o.SuspectAfter, "failover: how long a silent master (or slave) is suspected gone")
	fs.StringVar(&o.SlaveDown, "slave-down", o.SlaveDown, "with --wait-slave: when the eligible slave is gone, alone (drop it from the eligible set and serve alone) or readonly")
	o.Log.AddFlags(fs)
	o.Secure.AddFlags(fs)
}

// Validate reports the first setting that cannot work.
func (o *Options) Validate() error {
	switch {
	case o.Group == "" || !isName(o.Group):
		return fmt.Errorf("realtime: group %q must be a name of [A-Za-z0-9._-]", o.Group)
	case o.Addr == "":
		return fmt.Errorf("realtime: addr must be set")
	case o.DataDir == "":
		return fmt.Errorf("realtime: data dir must be set")
	case o.Flush != string(store.FlushSync) && o.Flush != string(store.FlushAsync):
		return fmt.Errorf("realtime: flush must be sync or async, got %q", o.Flush)
	case o.FlushInterval <= 0:
		return fmt.Errorf("realtime: flush interval must be positive")
	case o.HeartbeatInterval <= 0:
		return fmt.Errorf("realtime: heartbeat interval must be positive")
	case o.DedupeWindow < 0 || o.DedupeCapacity < 0:
		return fmt.Errorf("realtime: dedupe window and capacity must not be negative")
	case o.PullWorkers < 0:
		return fmt.Errorf("realtime: pull workers must not be negative")
	case o.TimeSlice <= 0 || o.MaxPullWait <= 0 || o.PullGrace <= 0:
		return fmt.Errorf("realtime: time slice, max pull wait and pull grace must be positive")
	case o.MaxPullMessages <= 0:
		return fmt.Errorf("realtime: max pull messages must be positive")
	case o.ConsumerTimeout <= 0 || o.RetryDelay < 0:
		return fmt.Errorf("realtime: consumer timeout must be positive and retry delay not negative")
	case o.MaxBody <= 0 || o.MaxFrameSize <= o.MaxBody:
		return fmt.Errorf("realtime: max body must be positive and below max frame size")
	case o.ShutdownTimeout <= 0:
		return fmt.Errorf("realtime: shutdown timeout must be positive")
	case o.Spin > netserver.MaxSpin:
		return fmt.Errorf("realtime: spin must be at most %v, got %v", netserver.MaxSpin, o.Spin)
	case o.Role != RoleMaster && o.Role != RoleSlave:
		return fmt.Errorf("realtime: role must be %q or %q, got %q", RoleMaster, RoleSlave, o.Role)
	case o.Role == RoleSlave && o.Master == "" && len(o.MetaServers) == 0:
		return fmt.Errorf("realtime: a slave needs the master's address or meta servers that name it")
	case o.Role == RoleSlave && o.WaitSlave && (o.Master != "" || len(o.MetaServers) == 0):
		// Under failover a slave may become the master: it keeps the option.
		return fmt.Errorf("realtime: --wait-slave is a master's option (a slave takes it only when it can be elected: meta servers and no --master)")
	case o.SlaveLagReadonly <= 0 || o.MaxWaitingAcks <= 0:
		return fmt.Errorf("realtime: slave lag readonly and max waiting acks must be positive")
	case o.SyncMaxBytes < 4<<10 || o.SyncMaxBytes > o.MaxFrameSize/2-1024:
		return fmt.Errorf("realtime: sync max bytes must be between 4 KiB and half the max frame size")
	case o.SyncWait <= 0 || o.SyncWait > 10*time.Second:
		return fmt.Errorf("realtime: sync wait must be positive and at most 10s")
	case o.SuspectAfter < 100*time.Millisecond:
		return fmt.Errorf("realtime: suspect after must be at least 100ms")
	case o.SlaveDown != failover.SlaveDownAlone && o.SlaveDown != failover.SlaveDownReadonly:
		return fmt.Errorf("realtime: slave down must be %q or %q, got %q", failover.SlaveDownAlone, failover.SlaveDownReadonly, o.SlaveDown)
	}
	if err := o.FairShare.Validate(); err != nil {
		return err
	}
	if err := o.Secure.Validate(o.Addr, o.HTTPAddr); err != nil {
		return fmt.Errorf("realtime: %w", err)
	}
	if len(o.MetaServers) > 0 {
		// The registered address is where clients and the group's other
		// server connect: never a wildcard.
		if err := exposure.CheckAdvertise(o.Addr, o.AdvertiseAddr, "--advertise-addr"); err != nil {
			return fmt.Errorf("realtime: %w", err)
		}
	}
	return o.Log.Validate()
}

func isName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return s != ""
}

// slaveLease is the slave lease of async failover: a constant of
// pkg/failover, so master and slave always agree on it.
func (o *Options) slaveLease() time.Duration { return failover.NewOptions().SlaveLease }

// syncWait is how long the master may hold a sync request: SyncWait, at
// most half of SuspectAfter (a slave hears from its master that often, or
// suspects it).
func (o *Options) syncWait() time.Duration { return min(o.SyncWait, o.SuspectAfter/2) }

package store

import (
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// FlushMode says when Append reports messages stored.
type FlushMode string

const (
	// FlushSync completes an Append after fdatasync of the message log; one
	// fdatasync covers every message appended meanwhile (group commit).
	FlushSync FlushMode = "sync"
	// FlushAsync completes an Append once the message log write reached the
	// operating system, and fdatasyncs every FlushInterval.
	FlushAsync FlushMode = "async"
)

// DefaultHorizon is how far ahead a message may be due: two years, a leap
// day included (protocol.DefaultDelayHorizon, which clients name in their
// errors).
const DefaultHorizon = protocol.DefaultDelayHorizon

// maxHorizon keeps due times within years of four digits, which hour file
// names (yyyyMMddHH) can hold.
const maxHorizon = 100 * 365 * 24 * time.Hour

// Options configure a Store. A zero field takes its default.
type Options struct {
	// Flush is FlushSync (default) or FlushAsync.
	Flush FlushMode
	// FlushInterval is the fdatasync interval under FlushAsync (default 100ms).
	FlushInterval time.Duration
	// SegmentSize is the size of a message-log segment (default 64 MiB,
	// at least 1 MiB).
	SegmentSize int64
	// FS is the file system of the message log (default fsutil.OS; tests
	// inject full disks and I/O errors through fsutil.FaultFS).
	FS fsutil.FS
	// Window is how far ahead messages are loaded into the wheel (default
	// 30m): each enters it between Window and 5/6 Window before it is due.
	Window time.Duration
	// Tick is the wheel's tick (default 500ms). Entries fire at their exact
	// due time regardless; the tick also bounds how long a forward clock
	// jump goes unnoticed.
	Tick time.Duration
	// Horizon is how far ahead a message may be due (default DefaultHorizon,
	// at most 100 years).
	Horizon time.Duration
	// Keep is how long the files of a fully dispatched hour are kept after
	// the hour ends (default 24h).
	Keep time.Duration
	// CheckpointInterval is how often replay progress is checkpointed
	// (default 1s; less often when a checkpoint takes over a tenth of it) and
	// dispatch logs are fsynced.
	CheckpointInterval time.Duration
	// SyncDispatch makes MarkDispatched fdatasync the dispatch log before it
	// returns, so that even a machine crash sends nothing again that was
	// marked; it costs one fdatasync per call (default false: marks reach the
	// operating system at once and are fsynced every CheckpointInterval).
	SyncDispatch bool
	// RetentionInterval is how often retention runs (default 1m).
	RetentionInterval time.Duration
	// MaxOpenFiles bounds the open schedule files and, separately, the open
	// dispatch files (default 64).
	MaxOpenFiles int
	// FireBatch is the most messages delivered in one Due batch (default 2048).
	FireBatch int
	// FireBatchBytes bounds the message bytes of one Due batch (default 4 MiB;
	// a batch always holds at least one message).
	FireBatchBytes int
	// MaxBacklog bounds the wheel while it catches up with hours that have
	// already ended (after downtime or a forward clock jump): such an hour is
	// loaded only while the wheel holds fewer entries than this (default
	// 1,000,000), so a long backlog streams through memory instead of
	// loading at once. Hours that have not ended load regardless.
	MaxBacklog int
	// DueQueue is the capacity, in batches, of the Due channel (default 4).
	DueQueue int
	// Limits are the message limits checked on Append (default
	// protocol.DefaultLimits).
	Limits protocol.Limits
	// CheckMessage, when set, is one more check of each appended message
	// (after the limits): an error refuses the message with it (the delay
	// server checks recurring schedules' expressions).
	CheckMessage func(v *protocol.View) error
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{
		Flush:              FlushSync,
		FlushInterval:      100 * time.Millisecond,
		SegmentSize:        64 << 20,
		Window:             30 * time.Minute,
		Tick:               500 * time.Millisecond,
		Horizon:            DefaultHorizon,
		Keep:               24 * time.Hour,
		CheckpointInterval: time.Second,
		RetentionInterval:  time.Minute,
		MaxOpenFiles:       64,
		FireBatch:          2048,
		FireBatchBytes:     4 << 20,
		MaxBacklog:         1_000_000,
		DueQueue:           4,
		Limits:             protocol.DefaultLimits,
	}
}

// withDefaults returns o with every zero field set to its default.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.Flush == "" {
		o.Flush = d.Flush
	}
	if o.FlushInterval == 0 {
		o.FlushInterval = d.FlushInterval
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = d.SegmentSize
	}
	if o.FS == nil {
		o.FS = fsutil.OS
	}
	if o.Window == 0 {
		o.Window = d.Window
	}
	if o.Tick == 0 {
		o.Tick = d.Tick
	}
	if o.Horizon == 0 {
		o.Horizon = d.Horizon
	}
	if o.Keep == 0 {
		o.Keep = d.Keep
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = d.CheckpointInterval
	}
	if o.RetentionInterval == 0 {
		o.RetentionInterval = d.RetentionInterval
	}
	if o.MaxOpenFiles == 0 {
		o.MaxOpenFiles = d.MaxOpenFiles
	}
	if o.FireBatch == 0 {
		o.FireBatch = d.FireBatch
	}
	if o.FireBatchBytes == 0 {
		o.FireBatchBytes = d.FireBatchBytes
	}
	if o.MaxBacklog == 0 {
		o.MaxBacklog = d.MaxBacklog
	}
	if o.DueQueue == 0 {
		o.DueQueue = d.DueQueue
	}
	if o.Limits == (protocol.Limits{}) {
		o.Limits = d.Limits
	}
	return o
}

// Validate checks the options after defaults are applied.
func (o Options) Validate() error {
	o = o.withDefaults()
	switch {
	case o.Flush != FlushSync && o.Flush != FlushAsync:
		return fmt.Errorf("delay/store: Flush must be %q or %q, got %q", FlushSync, FlushAsync, o.Flush)
	case o.FlushInterval < 0:
		return fmt.Errorf("delay/store: FlushInterval must be positive, got %v", o.FlushInterval)
	case o.SegmentSize < 1<<20:
		return fmt.Errorf("delay/store: SegmentSize must be at least 1 MiB, got %d", o.SegmentSize)
	case o.Tick < time.Millisecond:
		return fmt.Errorf("delay/store: Tick must be at least 1ms, got %v", o.Tick)
	case o.Window < o.Tick:
		return fmt.Errorf("delay/store: Window must be at least Tick (%v), got %v", o.Tick, o.Window)
	case o.Horizon < 0 || o.Horizon > maxHorizon:
		return fmt.Errorf("delay/store: Horizon must be in 0..%v, got %v", maxHorizon, o.Horizon)
	case o.Keep < 0:
		return fmt.Errorf("delay/store: Keep must not be negative, got %v", o.Keep)
	case o.CheckpointInterval < 0 || o.RetentionInterval < 0:
		return fmt.Errorf("delay/store: CheckpointInterval and RetentionInterval must be positive")
	case o.MaxOpenFiles < 2:
		return fmt.Errorf("delay/store: MaxOpenFiles must be at least 2, got %d", o.MaxOpenFiles)
	case o.FireBatch < 1 || o.FireBatchBytes < 1 || o.DueQueue < 0 || o.MaxBacklog < 1:
		return fmt.Errorf("delay/store: FireBatch, FireBatchBytes, MaxBacklog and DueQueue must be positive")
	}
	return o.Limits.Validate()
}

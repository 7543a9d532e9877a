package store

import (
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// FlushPolicy says when appended messages become durable.
type FlushPolicy string

const (
	// FlushSync (the default) completes an append only after an fdatasync
	// covering it (group commit).
	FlushSync FlushPolicy = "sync"
	// FlushAsync completes an append once it is in the page cache and
	// fdatasyncs every FlushInterval.
	FlushAsync FlushPolicy = "async"
)

// Options configure a Store. Zero fields take the defaults in DefaultOptions.
type Options struct {
	// Flush is the durability policy of the message log (default FlushSync).
	Flush FlushPolicy
	// FlushInterval is the fdatasync interval under FlushAsync (default 200ms).
	FlushInterval time.Duration
	// SegmentSize is the size of a message-log segment (default 1 GiB).
	SegmentSize int64
	// ZeroFillAhead is how far ahead of its end the message log is kept
	// written with zeros under FlushSync, so that its fdatasyncs overwrite
	// written blocks instead of converting preallocated ones (default 16
	// MiB; negative turns it off; see doc.go, Zero filling).
	ZeroFillAhead int64
	// PageCacheWindow is how much of the message log's newest durable bytes
	// stays in the page cache: every PageCacheInterval what lies further
	// back is dropped from it (segment.Log.DropCache), so the log's writes
	// reuse the same memory instead of growing the cache (default negative:
	// the kernel decides; the broker sets 1 GiB, realtime.Options; see
	// doc.go, Page cache).
	PageCacheWindow int64
	// ReplicaPageCacheWindow is PageCacheWindow while the store is a
	// Replica (default negative; the broker sets 64 MiB): a replica's log
	// serves no consumer until Promote, which moves to PageCacheWindow.
	ReplicaPageCacheWindow int64
	// PageCacheInterval is how often the window moves (default 100ms).
	PageCacheInterval time.Duration
	// ActionSegmentSize is the size of an action-log segment (default 64 MiB).
	ActionSegmentSize int64
	// ConsumeSegmentEntries is the number of entries per consume-log segment
	// (default 1<<18: 10 MiB of 40-byte entries).
	ConsumeSegmentEntries int64
	// PullSegmentEntries is the number of entries per pull-log segment
	// (default 1<<18: 2 MiB of 8-byte entries).
	PullSegmentEntries int64
	// MaxOpenFiles bounds the consume-log and pull-log files kept open
	// (default 1024). Message-log and action-log segments are always open.
	MaxOpenFiles int
	// MaxBatchBytes caps the bytes one group commit writes (default 4 MiB).
	MaxBatchBytes int
	// ActionFlushInterval is how often pulls, acks and consumer events are
	// written and synced to the action log (default 50ms). Pull and ack state
	// newer than that may be lost in a crash; see "Action log" in doc.go.
	ActionFlushInterval time.Duration
	// CheckpointInterval is how often a checkpoint is written (default 1 min;
	// negative disables the loop; Checkpoint may still be called).
	CheckpointInterval time.Duration
	// RetentionAge deletes message-log segments whose every record is older
	// than this (default 72h; negative keeps messages forever).
	RetentionAge time.Duration
	// RetentionBytes deletes the oldest message-log segments while the log is
	// larger than this (0, the default, means no size limit).
	RetentionBytes int64
	// RetentionInterval is how often retention runs (default 1 min; negative
	// disables it).
	RetentionInterval time.Duration
	// MaxScan bounds the consume-log entries one pull skips (tag filter
	// misses, holes) before it answers with what it has (default 4096).
	MaxScan int
	// Limits are the message limits appends are checked against (default
	// protocol.DefaultLimits).
	Limits protocol.Limits
	// SkipCorrupt chooses the rule for corruption found in the middle of a
	// log during recovery: false (the default) makes Open fail with an error
	// wrapping ErrCorrupt that names the damaged range; true skips the damaged
	// range, logs it, counts it in Stats and opens. Damaged records are never
	// served either way.
	SkipCorrupt bool
	// FS is the file system every file goes through (default fsutil.OS).
	FS fsutil.FS
	// Clock returns the current time (default time.Now).
	Clock func() time.Time
	// OnAppend, when set, is called after new entries of a watched subject
	// (Store.Watch) became readable (durable under FlushSync); next is the
	// subject's next sequence. It runs on the store's commit goroutine and
	// must not block.
	OnAppend func(subject string, next int64)
	// Replica opens the store as a copy of a master's (see "Replication" in
	// doc.go): appends, pulls, acks and consumer changes fail with
	// ErrReplica, and ReplicateMessages and ReplicateActions feed it, until
	// Promote.
	Replica bool
	// ActionLogFloor, when set, returns an action-log offset that
	// checkpoints must keep segments from (a slave still copying them), or
	// a negative value for none.
	ActionLogFloor func() int64
	// NoMessageIndex turns off the index of messages by id and key
	// (msgindex.go; on by default): Lookup.ByID and Lookup.ByKey then fail with
	// ErrNoIndex.
	NoMessageIndex bool
	// CopyMessageIndex, with Replica, has the replica's message index copy
	// its master's run files (Replica.AddIndexRun, indexcopy.go) instead
	// of indexing the records it copies; Promote, or BuildMessageIndex,
	// turns it back to indexing the log past the last run.
	CopyMessageIndex bool
}

// DefaultOptions holds every default.
var DefaultOptions = Options{
	Flush:                  FlushSync,              // durable acks, group commit
	FlushInterval:          200 * time.Millisecond, // async fdatasync period
	SegmentSize:            1 << 30,                // 1 GiB message-log segments
	ZeroFillAhead:          16 << 20,               // written zeros ahead of the log's end
	PageCacheWindow:        -1,                     // the page cache left to the kernel
	ReplicaPageCacheWindow: -1,                     // the same on a replica
	PageCacheInterval:      100 * time.Millisecond, // how often the window moves
	ActionSegmentSize:      64 << 20,               // 64 MiB action-log segments
	ConsumeSegmentEntries:  1 << 18,                // 10 MiB consume-log files
	PullSegmentEntries:     1 << 18,                // 2 MiB pull-log files
	MaxOpenFiles:           1024,                   // LRU of fixed-log handles
	MaxBatchBytes:          4 << 20,                // one group commit
	ActionFlushInterval:    50 * time.Millisecond,  // pull/ack persistence lag
	CheckpointInterval:     time.Minute,            // replay at most ~1 min
	RetentionAge:           72 * time.Hour,         // as QMQ
	RetentionBytes:         0,                      // no size limit
	RetentionInterval:      time.Minute,            // retention check period
	MaxScan:                4096,                   // filtered-pull scan bound
	Limits:                 protocol.DefaultLimits, // message limits
}

// withDefaults returns o with zero fields set from DefaultOptions.
func (o Options) withDefaults() Options {
	d := DefaultOptions
	if o.Flush == "" {
		o.Flush = d.Flush
	}
	if o.FlushInterval == 0 {
		o.FlushInterval = d.FlushInterval
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = d.SegmentSize
	}
	if o.ZeroFillAhead == 0 {
		o.ZeroFillAhead = d.ZeroFillAhead
	}
	if o.PageCacheWindow == 0 {
		o.PageCacheWindow = d.PageCacheWindow
	}
	if o.ReplicaPageCacheWindow == 0 {
		o.ReplicaPageCacheWindow = d.ReplicaPageCacheWindow
	}
	if o.PageCacheInterval == 0 {
		o.PageCacheInterval = d.PageCacheInterval
	}
	if o.ActionSegmentSize == 0 {
		o.ActionSegmentSize = d.ActionSegmentSize
	}
	if o.ConsumeSegmentEntries == 0 {
		o.ConsumeSegmentEntries = d.ConsumeSegmentEntries
	}
	if o.PullSegmentEntries == 0 {
		o.PullSegmentEntries = d.PullSegmentEntries
	}
	if o.MaxOpenFiles == 0 {
		o.MaxOpenFiles = d.MaxOpenFiles
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = d.MaxBatchBytes
	}
	if o.ActionFlushInterval == 0 {
		o.ActionFlushInterval = d.ActionFlushInterval
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = d.CheckpointInterval
	}
	if o.RetentionAge == 0 {
		o.RetentionAge = d.RetentionAge
	}
	if o.RetentionInterval == 0 {
		o.RetentionInterval = d.RetentionInterval
	}
	if o.MaxScan == 0 {
		o.MaxScan = d.MaxScan
	}
	if o.Limits == (protocol.Limits{}) {
		o.Limits = d.Limits
	}
	if o.FS == nil {
		o.FS = fsutil.OS
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return o
}

// Validate checks o after defaults are applied.
func (o Options) Validate() error {
	o = o.withDefaults()
	switch {
	case o.Flush != FlushSync && o.Flush != FlushAsync:
		return fmt.Errorf("store: Flush must be %q or %q, got %q", FlushSync, FlushAsync, o.Flush)
	case o.FlushInterval < 0:
		return fmt.Errorf("store: FlushInterval must be positive, got %v", o.FlushInterval)
	case o.SegmentSize < 1<<16:
		return fmt.Errorf("store: SegmentSize must be at least 64 KiB, got %d", o.SegmentSize)
	case o.ActionSegmentSize < 256<<10:
		// The largest action (a pull of MaxPull entries) must fit.
		return fmt.Errorf("store: ActionSegmentSize must be at least 256 KiB, got %d", o.ActionSegmentSize)
	case o.ConsumeSegmentEntries < 16 || o.PullSegmentEntries < 16:
		return fmt.Errorf("store: ConsumeSegmentEntries and PullSegmentEntries must be at least 16")
	case o.MaxOpenFiles < 8:
		return fmt.Errorf("store: MaxOpenFiles must be at least 8, got %d", o.MaxOpenFiles)
	case o.MaxBatchBytes < 1<<10:
		return fmt.Errorf("store: MaxBatchBytes must be at least 1 KiB, got %d", o.MaxBatchBytes)
	case o.PageCacheInterval < 0:
		return fmt.Errorf("store: PageCacheInterval must be positive, got %v", o.PageCacheInterval)
	case o.ActionFlushInterval < 0:
		return fmt.Errorf("store: ActionFlushInterval must be positive, got %v", o.ActionFlushInterval)
	case o.RetentionBytes < 0:
		return fmt.Errorf("store: RetentionBytes must not be negative, got %d", o.RetentionBytes)
	case o.MaxScan < 1:
		return fmt.Errorf("store: MaxScan must be positive, got %d", o.MaxScan)
	case int64(o.Limits.MaxEncodedSize())+64 > o.SegmentSize:
		return fmt.Errorf("store: SegmentSize %d cannot hold the largest message the limits allow (%d bytes)", o.SegmentSize, o.Limits.MaxEncodedSize())
	}
	return o.Limits.Validate()
}

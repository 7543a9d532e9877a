package outbox

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// Option configures an Outbox.
type Option func(*config)

type config struct {
	table         string
	delay         time.Duration
	scanInterval  time.Duration
	batch         int
	sendTimeout   time.Duration
	retryMin      time.Duration
	retryMax      time.Duration
	statsInterval time.Duration
	watchdog      bool
	syncSend      bool
	logger        *zap.Logger
	registerer    prometheus.Registerer
	limits        protocol.Limits
	now           func() time.Time
	// afterCommit runs after a transaction's commit, before its messages
	// are handed to the sender (tests: a process killed right there).
	afterCommit func(ids []string)
}

func defaultConfig() config {
	return config{
		table:         DefaultTable,
		delay:         10 * time.Second,
		scanInterval:  500 * time.Millisecond,
		batch:         100,
		sendTimeout:   10 * time.Second,
		retryMin:      time.Second,
		retryMax:      time.Minute,
		statsInterval: 15 * time.Second,
		watchdog:      true,
		limits:        protocol.DefaultLimits,
		now:           time.Now,
	}
}

func (c *config) validate() error {
	switch {
	case !tableName.MatchString(c.table):
		return fmt.Errorf("%w: %q", ErrTableName, c.table)
	case c.delay <= 0:
		return fmt.Errorf("outbox: delay must be positive, got %v", c.delay)
	case c.scanInterval <= 0:
		return fmt.Errorf("outbox: scan interval must be positive, got %v", c.scanInterval)
	case c.batch <= 0:
		return fmt.Errorf("outbox: batch must be positive, got %d", c.batch)
	case c.sendTimeout <= 0:
		return fmt.Errorf("outbox: send timeout must be positive, got %v", c.sendTimeout)
	case c.retryMin <= 0 || c.retryMax < c.retryMin:
		return fmt.Errorf("outbox: retry back-off must satisfy 0 < min <= max, got %v and %v", c.retryMin, c.retryMax)
	case c.statsInterval <= 0:
		return fmt.Errorf("outbox: stats interval must be positive, got %v", c.statsInterval)
	}
	return c.limits.Validate()
}

// WithTable sets the outbox table's name (default "qmq_outbox"; letters,
// digits and underscores, optionally "schema.table").
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// WithDelay sets how old a row must be before the watchdog sends it
// (default 10 s). A committed transaction's messages go to the sender at
// once; the watchdog is for those a crash, a failed send or a transaction
// committed without Tx.Commit left behind. Keep it above the time a send
// normally takes, including the producer's retries (producer.WithSendTimeout),
// or a slow first send and the watchdog's may both store the message (the
// broker drops the second copy only when both reach the same broker group).
func WithDelay(d time.Duration) Option { return func(c *config) { c.delay = d } }

// WithScanInterval sets how often the watchdog looks for due rows when the
// last look found fewer than a batch (default 500 ms, ±20 % jitter). A row
// left behind goes out within about delay + interval.
func WithScanInterval(d time.Duration) Option { return func(c *config) { c.scanInterval = d } }

// WithBatch sets how many rows the watchdog claims per scan (default 100).
func WithBatch(n int) Option { return func(c *config) { c.batch = n } }

// WithSendTimeout bounds how long the watchdog waits for the broker to
// acknowledge a scan's messages (default 10 s); messages not acknowledged by
// then are tried again after a back-off. On PostgreSQL and MySQL the claimed
// rows stay locked for that long at most; on SQLite it sets the lease:
// twice the timeout.
func WithSendTimeout(d time.Duration) Option { return func(c *config) { c.sendTimeout = d } }

// WithRetryBackoff sets the watchdog's back-off after a failed send of a
// row: min doubled per failed attempt up to max, times a random factor in
// [0.5, 1.5) (defaults 1 s and 1 min). The same back-off paces scans after
// database errors.
func WithRetryBackoff(min, max time.Duration) Option {
	return func(c *config) { c.retryMin, c.retryMax = min, max }
}

// WithStatsInterval sets how often the watchdog counts the rows waiting
// and the age of the oldest for the metrics (default 15 s).
func WithStatsInterval(d time.Duration) Option { return func(c *config) { c.statsInterval = d } }

// WithoutWatchdog turns the watchdog off in this instance: it only writes
// and sends after commit. At least one instance on the table must run one.
func WithoutWatchdog() Option { return func(c *config) { c.watchdog = false } }

// WithSyncSend makes Tx.Commit (and Transact, and Tx.Committed) wait after
// the commit until the broker has stored the transaction's messages, or
// their sends failed, or the send timeout passed, before it returns; by
// default they return once the messages are handed to the producer. Either
// way a committed message is safe: one whose send fails is the watchdog's.
// A transaction of one message is sent with the producer's Send from the
// committing goroutine.
func WithSyncSend() Option { return func(c *config) { c.syncSend = true } }

// WithLogger sets the logger (default none).
func WithLogger(lg *zap.Logger) Option { return func(c *config) { c.logger = lg } }

// WithRegisterer registers the outbox's metrics (qmq_outbox_*, labelled with
// the table) with reg (default: not registered).
func WithRegisterer(reg prometheus.Registerer) Option { return func(c *config) { c.registerer = reg } }

// WithLimits sets the message limits checked by Tx.Send (default
// protocol.DefaultLimits; use the producer's).
func WithLimits(l protocol.Limits) Option { return func(c *config) { c.limits = l } }

// withClock replaces time.Now (tests).
func withClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// withAfterCommit runs fn after each commit, before the messages are handed
// to the sender (tests).
func withAfterCommit(fn func(ids []string)) Option { return func(c *config) { c.afterCommit = fn } }

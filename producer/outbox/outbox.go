package outbox

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/msgid"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/producer"
)

// Sender is where the outbox hands messages: a *producer.Producer. The
// callback must be called once per message that SendAsync accepted.
type Sender interface {
	SendAsync(msg *producer.Message, callback func(*producer.Message, error)) error
}

// encodedSender is a Sender that can also send a message as encoded bytes,
// keeping them (*producer.Producer's SendEncoded, which sends to a realtime
// group whatever the message's deliver-at time).
type encodedSender interface {
	SendEncoded(raw []byte, callback func(error)) error
}

// syncSender is a Sender that can also send one message and wait for the
// broker in the caller's goroutine (*producer.Producer's Send): WithSyncSend
// uses it for a transaction of one message.
type syncSender interface {
	Send(ctx context.Context, msg *producer.Message) error
}

// Outbox writes messages into a table of the caller's database inside the
// caller's transactions and sends them once the transactions commit. It is
// safe for concurrent use.
type Outbox struct {
	db      *sql.DB
	dialect Dialect
	sender  Sender
	cfg     config
	lg      *zap.Logger
	stmt    statements
	ids     *msgid.Generator
	metrics *metrics
	owner   string // this instance's part of lease tokens (MySQL, SQLite)
	scans   int    // scans so far; the rest of a lease token (watchdogLoop only)

	mu       sync.Mutex
	closed   bool
	inflight map[string]struct{} // handed to the sender; outcome or delete pending
	toDelete []string            // acknowledged, row not deleted yet

	wakeDelete chan struct{} // deleteLoop has work (capacity 1)
	stop       chan struct{} // closed by Close: loops end
	deleterEnd chan struct{} // closed by Close after the last delete was queued
	wg         sync.WaitGroup
}

// Paths a message takes to the broker, for metrics and logs.
const (
	pathCommit   = "commit"   // handed over when its transaction committed
	pathWatchdog = "watchdog" // sent by a watchdog scan
)

// New returns an outbox on db's table (WithTable) in dialect d, sending
// through sender. The table must exist (CreateSchema). Unless
// WithoutWatchdog, the watchdog starts at once. Close it before the sender.
func New(db *sql.DB, d Dialect, sender Sender, opts ...Option) (*Outbox, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := d.validate(); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if db == nil || sender == nil {
		return nil, errors.New("outbox: New needs a database and a sender")
	}
	lg := cfg.logger
	if lg == nil {
		lg = zap.NewNop()
	}
	var token [8]byte
	crand.Read(token[:])
	o := &Outbox{
		db: db, dialect: d, sender: sender, cfg: cfg,
		lg:         lg.Named("outbox").With(zap.String("table", cfg.table)),
		stmt:       newStatements(d, cfg.table),
		ids:        msgid.New(cfg.now),
		owner:      hex.EncodeToString(token[:]),
		inflight:   map[string]struct{}{},
		wakeDelete: make(chan struct{}, 1),
		stop:       make(chan struct{}),
		deleterEnd: make(chan struct{}),
	}
	m, err := newMetrics(cfg.registerer, cfg.table)
	if err != nil {
		return nil, err
	}
	o.metrics = m
	o.wg.Add(1)
	go o.deleteLoop()
	if cfg.watchdog {
		o.wg.Add(2)
		go o.watchdogLoop()
		go o.statsLoop()
	}
	return o, nil
}

// CreateSchema creates the outbox table and its index in db if they do not
// exist (the DDL in doc.go; WithTable names the table, other options are
// ignored).
func CreateSchema(ctx context.Context, db *sql.DB, d Dialect, opts ...Option) error {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	stmts, err := DDL(d, cfg.table)
	if err != nil {
		return err
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("outbox: create schema: %w", err)
		}
	}
	return nil
}

// hand gives the message v (parsed from its row's bytes) to the sender. w,
// when not nil, is a watchdog scan waiting for the outcome; after, when not
// nil, is called once the outcome is recorded. It reports false when the
// message is already on its way from this instance (nothing is sent then,
// and after is not called).
//
// A message due now goes as the very bytes of its row (SendEncoded) when
// the sender takes encoded messages, as *producer.Producer does; a delayed
// one is decoded and sent with SendAsync, which routes it to a delay group.
func (o *Outbox) hand(v *protocol.View, path string, w *scanWait, after func(error)) bool {
	id := string(v.ID)
	if !o.claimInflight(id) {
		return false
	}
	if w != nil {
		w.expect()
	}
	done := func(err error) {
		o.outcome(id, path, w, err)
		if after != nil {
			after(err)
		}
	}
	var err error
	if enc, ok := o.sender.(encodedSender); ok && v.DeliverAtMillis <= o.cfg.now().UnixMilli() {
		err = enc.SendEncoded(v.Raw, done)
	} else {
		err = o.sender.SendAsync(v.Message(), func(_ *producer.Message, err error) { done(err) })
	}
	if err != nil {
		done(fmt.Errorf("outbox: queue message: %w", err))
	}
	return true
}

// claimInflight marks id as on its way from this instance; it reports false
// if it already was.
func (o *Outbox) claimInflight(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, busy := o.inflight[id]; busy {
		return false
	}
	o.inflight[id] = struct{}{}
	return true
}

// outcome records what the broker said about message id. It runs on the
// sender's callback goroutine, so it only takes a lock.
func (o *Outbox) outcome(id, path string, w *scanWait, err error) {
	if err == nil {
		o.metrics.sent.WithLabelValues(path).Inc()
	} else {
		o.metrics.failures.WithLabelValues(path).Inc()
	}
	if w != nil && w.take(id, err) {
		return // the scan updates the row and clears inflight
	}
	if err != nil {
		o.lg.Info("send failed; the watchdog will retry", zap.String("id", id), zap.String("path", path), zap.Error(err))
		o.mu.Lock()
		delete(o.inflight, id)
		o.mu.Unlock()
		return
	}
	o.queueDelete(id)
}

// maxPendingDeletes bounds the acknowledged ids waiting for their rows to
// be deleted while the database fails; beyond it ids are dropped (their
// rows are sent again by the watchdog, and dropped by the broker's dedupe).
const maxPendingDeletes = 100_000

func (o *Outbox) queueDelete(ids ...string) {
	o.mu.Lock()
	for _, id := range ids {
		if len(o.toDelete) >= maxPendingDeletes {
			delete(o.inflight, id)
			continue
		}
		o.toDelete = append(o.toDelete, id)
	}
	o.mu.Unlock()
	select {
	case o.wakeDelete <- struct{}{}:
	default:
	}
}

// settled forgets ids: their rows were deleted or updated.
func (o *Outbox) settled(ids ...string) {
	o.mu.Lock()
	for _, id := range ids {
		delete(o.inflight, id)
	}
	o.mu.Unlock()
}

// busy reports whether id is on its way from this instance.
func (o *Outbox) busy(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.inflight[id]
	return ok
}

// Close stops the watchdog, waits until every message handed to the sender
// has its answer and its row is deleted, or ctx ends; messages still
// unanswered then stay in the table for a watchdog. Transactions begun
// before Close can still commit: their messages wait for a watchdog. Close
// does not close the sender or the database.
func (o *Outbox) Close(ctx context.Context) error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true
	o.mu.Unlock()
	close(o.stop)
	var err error
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for o.inflightCount() > 0 && err == nil {
		select {
		case <-tick.C:
		case <-ctx.Done():
			err = fmt.Errorf("outbox: close: %d messages unanswered: %w", o.inflightCount(), ctx.Err())
		}
	}
	close(o.deleterEnd)
	o.wg.Wait()
	return err
}

func (o *Outbox) inflightCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.inflight)
}

func (o *Outbox) isClosed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closed
}

// backoff returns the wait before try n (n ≥ 1) of something that failed:
// retryMin doubled per try up to retryMax, times a random factor in
// [0.5, 1.5).
func (o *Outbox) backoff(n int) time.Duration {
	d := o.cfg.retryMin
	for i := 1; i < n && d < o.cfg.retryMax; i++ {
		d *= 2
	}
	d = min(d, o.cfg.retryMax)
	return time.Duration(float64(d) * (0.5 + rand.Float64()))
}

// jitter returns d times a random factor in [0.8, 1.2).
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// sleepFor waits for d or until done is closed; it reports false if done
// was closed.
func sleepFor(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// permanent reports whether err means the broker will never take the
// message as it is (invalid, too large, due beyond the delay horizon).
func permanent(err error) bool {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		switch pe.Status {
		case protocol.StatusInvalid, protocol.StatusTooLarge, protocol.StatusBeyondHorizon:
			return true
		}
	}
	return false
}

// errorText is err's message cut to 1,000 bytes on a character boundary,
// for the last_error column.
func errorText(err error) string {
	s := err.Error()
	if len(s) <= 1000 {
		return s
	}
	cut := 1000
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut]
}

package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/producer"
)

// Tx is a database transaction that can carry messages: every method of
// *sql.Tx works on it, Send writes a message into the outbox table, and
// Commit commits and then hands the messages to the producer. A message of
// a transaction that rolls back is never sent.
type Tx struct {
	*sql.Tx
	o *Outbox

	mu      sync.Mutex
	pending [][]byte // encoded messages written by Send
	ids     []string
	done    bool
}

// Begin starts a transaction on the outbox's database.
func (o *Outbox) Begin(ctx context.Context, opts *sql.TxOptions) (*Tx, error) {
	if o.isClosed() {
		return nil, ErrClosed
	}
	tx, err := o.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &Tx{Tx: tx, o: o}, nil
}

// Wrap lets Send write into tx, a transaction on the outbox's database begun
// elsewhere (by a framework or an ORM). Commit the result with Tx.Commit;
// if the transaction is committed by other means, call Tx.Committed after.
func (o *Outbox) Wrap(tx *sql.Tx) *Tx { return &Tx{Tx: tx, o: o} }

// Transact runs fn in a transaction: when fn returns nil the transaction
// commits and the messages fn sent go to the producer; when fn returns an
// error or panics, the transaction rolls back and nothing is sent. It
// returns fn's error, or the commit's.
func (o *Outbox) Transact(ctx context.Context, opts *sql.TxOptions, fn func(tx *Tx) error) error {
	tx, err := o.Begin(ctx, opts)
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			tx.Rollback()
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	committed = true
	return tx.Commit()
}

// Send writes msg into the outbox table within the transaction. It fills in
// msg.ID and msg.Created when empty; the message keeps that id up to the
// broker, so a copy sent twice (a crash after the send, before the row was
// deleted) is dropped by the broker's dedupe. msg is encoded now: changing
// it afterwards changes nothing. An invalid message fails here without
// touching the transaction; a database error fails the transaction as any
// failed statement does.
func (t *Tx) Send(ctx context.Context, msg *producer.Message) error {
	t.mu.Lock()
	done := t.done
	t.mu.Unlock()
	if done {
		return ErrTxDone
	}
	o := t.o
	now := o.cfg.now()
	if msg.ID == "" {
		msg.ID = o.ids.NextAt(now)
	}
	if msg.Created.IsZero() {
		msg.Created = now
	}
	raw, err := protocol.AppendMessage(make([]byte, 0, msg.EncodedSize()), msg, o.cfg.limits)
	if err != nil {
		return fmt.Errorf("outbox: message %s: %w", msg.ID, err)
	}
	nowMs := now.UnixMilli()
	if _, err := t.Tx.ExecContext(ctx, o.stmt.insert, msg.ID, msg.Subject, raw, nowMs, nowMs); err != nil {
		return fmt.Errorf("outbox: insert message %s: %w", msg.ID, err)
	}
	t.mu.Lock()
	t.pending = append(t.pending, raw)
	t.ids = append(t.ids, msg.ID)
	t.mu.Unlock()
	return nil
}

// Commit commits the transaction and then hands its messages to the
// producer, without waiting for the broker (unless WithSyncSend): once
// Commit returns nil the messages are stored in the database and will reach
// the broker, from this process at once or from a watchdog after a crash. If
// the commit fails, nothing is sent (a commit whose outcome is unknown leaves
// any rows that did commit to the watchdog).
func (t *Tx) Commit() error {
	pending, ids, err := t.finish()
	if err != nil {
		return err
	}
	if err := t.Tx.Commit(); err != nil {
		return err
	}
	if t.o.cfg.afterCommit != nil {
		t.o.cfg.afterCommit(ids)
	}
	t.o.handOver(pending)
	return nil
}

// Rollback rolls the transaction back; its messages are never sent.
func (t *Tx) Rollback() error {
	if _, _, err := t.finish(); err != nil {
		return err
	}
	return t.Tx.Rollback()
}

// Committed hands the messages to the producer after the transaction was
// committed by other means than Tx.Commit (tx.Tx.Commit, a framework). It
// first reads which of the messages' rows the database shows outside the
// transaction and sends only those: after a rollback nothing is found and
// nothing is sent; called before the commit, it finds nothing either, and
// the watchdog sends the messages after the commit. It returns an error
// only when that read fails (the watchdog then sends them).
func (t *Tx) Committed(ctx context.Context) error {
	pending, ids, err := t.finish()
	if err != nil || len(ids) == 0 {
		return err
	}
	found, err := t.o.existing(ctx, ids)
	if err != nil {
		return err
	}
	var visible [][]byte
	for i, id := range ids {
		if found[id] {
			visible = append(visible, pending[i])
		}
	}
	t.o.handOver(visible)
	return nil
}

// finish marks the transaction done and returns its messages and their ids.
func (t *Tx) finish() ([][]byte, []string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil, nil, ErrTxDone
	}
	t.done = true
	p, ids := t.pending, t.ids
	t.pending, t.ids = nil, nil
	return p, ids, nil
}

// handOver gives committed messages (their encodings, which Tx.Send made
// and no caller can change) to the sender, unless the outbox is closed (the
// watchdog sends them then). With WithSyncSend it returns once every message
// has its outcome.
func (o *Outbox) handOver(raws [][]byte) {
	if len(raws) == 0 || o.isClosed() {
		return
	}
	msgs := make([]protocol.View, 0, len(raws))
	for _, raw := range raws {
		v, err := protocol.ParseMessage(raw)
		if err != nil {
			o.lg.Error("message encoded by Send does not parse; the watchdog will mark it failed", zap.Error(err))
			continue
		}
		msgs = append(msgs, v)
	}
	if !o.cfg.syncSend {
		for i := range msgs {
			o.hand(&msgs[i], pathCommit, nil, nil)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.cfg.sendTimeout)
	defer cancel()
	if s, ok := o.sender.(syncSender); ok && len(msgs) == 1 {
		if id := string(msgs[0].ID); o.claimInflight(id) {
			o.outcome(id, pathCommit, nil, s.Send(ctx, msgs[0].Message()))
		}
		return
	}
	var wg sync.WaitGroup
	for i := range msgs {
		wg.Add(1)
		if !o.hand(&msgs[i], pathCommit, nil, func(error) { wg.Done() }) {
			wg.Done()
		}
	}
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
	}
}

// existing returns which of ids have a row, read outside any transaction.
func (o *Outbox) existing(ctx context.Context, ids []string) (map[string]bool, error) {
	found := make(map[string]bool, len(ids))
	for start := 0; start < len(ids); start += maxIDsPerStatement {
		chunk := ids[start:min(len(ids), start+maxIDsPerStatement)]
		args := inList(chunk)
		rows, err := o.db.QueryContext(ctx, o.stmt.exists(len(args)), args...)
		if err != nil {
			return nil, fmt.Errorf("outbox: read committed rows: %w", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("outbox: read committed rows: %w", err)
			}
			found[id] = true
		}
		if err := rows.Close(); err != nil {
			return nil, fmt.Errorf("outbox: read committed rows: %w", err)
		}
	}
	return found, nil
}

// maxIDsPerStatement bounds the ids of one IN list (SQLite allows 32,766
// parameters, MySQL 65,535, PostgreSQL 65,535). A power of two: see inList.
const maxIDsPerStatement = 512

// inList returns ids as statement arguments, padded to a power of two by
// repeating the last id: the IN lists of the outbox's statements then take
// one of ten lengths, so a driver that prepares and caches each statement
// (pgx does) keeps ten, not one per batch size.
func inList(ids []string) []any {
	n := 1
	for n < len(ids) {
		n *= 2
	}
	a := make([]any, n)
	for i := range a {
		a[i] = ids[min(i, len(ids)-1)]
	}
	return a
}

package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// watchdogLoop scans for due rows: at once when it starts, again at once
// after a full batch, else every scan interval (with jitter); after a
// database error it backs off.
func (o *Outbox) watchdogLoop() {
	defer o.wg.Done()
	failures := 0
	for {
		n, err := o.scan()
		wait := jitter(o.cfg.scanInterval)
		switch {
		case err != nil:
			failures++
			o.metrics.scanErrors.Inc()
			wait = o.backoff(failures)
			o.lg.Warn("watchdog scan failed", zap.Int("failures", failures), zap.Duration("next", wait), zap.Error(err))
		case n >= o.cfg.batch:
			failures, wait = 0, 0
		default:
			failures = 0
		}
		if wait == 0 {
			select {
			case <-o.stop:
				return
			default:
				continue
			}
		}
		if !sleepFor(o.stop, wait) {
			return
		}
	}
}

// claimedRow is a due row a scan holds.
type claimedRow struct {
	id       string
	raw      []byte
	attempts int
}

// scan claims up to a batch of due rows, sends them, waits for the broker
// (up to the send timeout) and then deletes the acknowledged rows and
// reschedules the others. It returns how many rows it claimed.
//
// PostgreSQL: the rows are selected FOR UPDATE SKIP LOCKED in a
// read-committed transaction that stays open until the outcome is written,
// so another instance's scan skips them, and a crash of this one (its
// connection closes) frees them at once.
//
// MySQL and MariaDB lease the rows instead, in a short transaction: SELECT
// … FOR UPDATE SKIP LOCKED names candidates, an UPDATE sets claimed_by to
// this scan's token and due_ms to the lease end (twice the send timeout)
// where a candidate is still due, and the rows holding the token are read
// back. The UPDATE's re-check is what makes the claim safe: under READ
// COMMITTED, MariaDB 10.11's SKIP LOCKED was seen returning rows another
// transaction had locked (two scans took the same rows), and REPEATABLE
// READ would gap-lock the index against the application's inserts.
//
// SQLite: one UPDATE … RETURNING sets the token and the lease.
//
// With a lease, the outcome is written only where claimed_by still holds
// the token; a crashed instance's rows come back when their lease ends.
func (o *Outbox) scan() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), o.cfg.sendTimeout+time.Minute)
	defer cancel()
	now := o.cfg.now()
	cutoff := now.Add(-o.cfg.delay).UnixMilli()
	lease := now.Add(2 * o.cfg.sendTimeout).UnixMilli()
	o.scans++
	token := fmt.Sprintf("%s-%d", o.owner, o.scans)
	switch o.dialect {
	case SQLite:
		rows, err := o.db.QueryContext(ctx, o.stmt.claim, token, lease, now.UnixMilli(), cutoff, o.cfg.batch)
		if err != nil {
			return 0, fmt.Errorf("outbox: claim rows: %w", err)
		}
		claimed, err := readClaimed(rows)
		if err != nil || len(claimed) == 0 {
			return len(claimed), err
		}
		return len(claimed), o.sendAndRecord(ctx, o.db, claimed, token)
	case MySQL:
		claimed, candidates, err := o.claimMySQL(ctx, token, now.UnixMilli(), cutoff, lease)
		if err != nil || len(claimed) == 0 {
			return candidates, err
		}
		return candidates, o.sendAndRecord(ctx, o.db, claimed, token)
	}
	tx, err := o.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, fmt.Errorf("outbox: claim rows: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, o.stmt.claim, now.UnixMilli(), cutoff, o.cfg.batch)
	if err != nil {
		return 0, fmt.Errorf("outbox: claim rows: %w", err)
	}
	claimed, err := readClaimed(rows)
	if err != nil {
		return 0, err
	}
	if len(claimed) == 0 {
		return 0, tx.Commit()
	}
	return len(claimed), o.sendAndRecord(ctx, tx, claimed, "")
}

// claimMySQL leases due rows to token (see scan). It returns the rows
// claimed and how many candidates SKIP LOCKED named.
func (o *Outbox) claimMySQL(ctx context.Context, token string, now, cutoff, lease int64) ([]claimedRow, int, error) {
	tx, err := o.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, 0, fmt.Errorf("outbox: claim rows: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, o.stmt.claim, now, cutoff, o.cfg.batch)
	if err != nil {
		return nil, 0, fmt.Errorf("outbox: claim rows: %w", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, 0, fmt.Errorf("outbox: claim rows: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil {
		return nil, 0, fmt.Errorf("outbox: claim rows: %w", err)
	}
	if len(ids) == 0 {
		return nil, 0, tx.Commit()
	}
	candidates := inList(ids)
	args := append([]any{token, lease, now, cutoff}, candidates...)
	if _, err := tx.ExecContext(ctx, o.stmt.claimUpdate(len(candidates)), args...); err != nil {
		return nil, 0, fmt.Errorf("outbox: claim rows: %w", err)
	}
	rows, err = tx.QueryContext(ctx, o.stmt.claimRead(len(candidates)), append([]any{token}, candidates...)...)
	if err != nil {
		return nil, 0, fmt.Errorf("outbox: claim rows: %w", err)
	}
	claimed, err := readClaimed(rows)
	if err != nil {
		return nil, 0, err
	}
	if err := tx.Commit(); err != nil {
		return nil, 0, fmt.Errorf("outbox: claim rows: %w", err)
	}
	return claimed, len(ids), nil
}

func readClaimed(rows *sql.Rows) ([]claimedRow, error) {
	defer rows.Close()
	var claimed []claimedRow
	for rows.Next() {
		var r claimedRow
		if err := rows.Scan(&r.id, &r.raw, &r.attempts); err != nil {
			return nil, fmt.Errorf("outbox: read claimed rows: %w", err)
		}
		claimed = append(claimed, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: read claimed rows: %w", err)
	}
	return claimed, nil
}

// execer is a *sql.Tx (PostgreSQL, MySQL) or the *sql.DB (SQLite).
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// sendAndRecord sends the claimed rows' messages and writes the outcome
// through ex, committing it when ex is a transaction. token is the scan's
// lease token ("" on PostgreSQL, whose rows ex's transaction locks).
func (o *Outbox) sendAndRecord(ctx context.Context, ex execer, claimed []claimedRow, token string) error {
	w := newScanWait()
	var handed, failed []claimedRow
	failErr := map[string]error{}
	for _, r := range claimed {
		v, err := protocol.ParseMessage(r.raw)
		if err == nil && string(v.ID) != r.id {
			err = fmt.Errorf("row %q holds message %q", r.id, v.ID)
		}
		if err != nil {
			failed = append(failed, r)
			failErr[r.id] = fmt.Errorf("outbox: stored message: %w", err)
			continue
		}
		if o.hand(&v, pathWatchdog, w, nil) {
			handed = append(handed, r)
		} // else on its way from this instance already: leave the row alone
	}
	results := w.wait(o.cfg.sendTimeout)

	var acked, retry []claimedRow
	retryErr := map[string]error{}
	for _, r := range handed {
		err, answered := results[r.id]
		switch {
		case !answered:
			retry = append(retry, r)
			retryErr[r.id] = fmt.Errorf("outbox: no answer within %v", o.cfg.sendTimeout)
		case err == nil:
			acked = append(acked, r)
		case permanent(err):
			failed = append(failed, r)
			failErr[r.id] = err
		default:
			retry = append(retry, r)
			retryErr[r.id] = err
		}
	}
	err := o.record(ctx, ex, token, acked, retry, retryErr, failed, failErr)
	if tx, ok := ex.(*sql.Tx); ok && err == nil {
		err = tx.Commit()
	}
	if err != nil {
		// The outcome is not written: the acknowledged rows go to the
		// deleter; the rest become due again as they were.
		o.queueDelete(ids(acked)...)
		o.settled(ids(retry)...)
		return err
	}
	o.settled(ids(acked)...)
	o.settled(ids(retry)...)
	if len(retry) > 0 || len(failed) > 0 {
		o.lg.Info("watchdog scan", zap.Int("claimed", len(claimed)), zap.Int("sent", len(acked)),
			zap.Int("retry", len(retry)), zap.Int("failed", len(failed)))
	}
	return nil
}

// record deletes the acknowledged rows, reschedules the ones to retry after
// their back-off and marks the failed ones.
func (o *Outbox) record(ctx context.Context, ex execer, token string, acked, retry []claimedRow, retryErr map[string]error,
	failed []claimedRow, failErr map[string]error) error {
	withToken := func(args ...any) []any {
		if token != "" {
			args = append(args, token)
		}
		return args
	}
	for start := 0; start < len(acked); start += maxIDsPerStatement {
		chunk := ids(acked[start:min(len(acked), start+maxIDsPerStatement)])
		args := inList(chunk)
		if _, err := ex.ExecContext(ctx, o.stmt.deleteClaimed(len(args)), withToken(args...)...); err != nil {
			return fmt.Errorf("outbox: delete sent rows: %w", err)
		}
	}
	if len(acked) > 0 {
		o.metrics.deleted.Add(float64(len(acked)))
	}
	now := o.cfg.now()
	for _, r := range retry {
		due := now.Add(o.backoff(r.attempts + 1)).UnixMilli()
		if _, err := ex.ExecContext(ctx, o.stmt.retry, withToken(due, errorText(retryErr[r.id]), r.id)...); err != nil {
			return fmt.Errorf("outbox: reschedule row: %w", err)
		}
	}
	for _, r := range failed {
		o.lg.Error("broker refused a message for good; row marked failed", zap.String("id", r.id), zap.Error(failErr[r.id]))
		if _, err := ex.ExecContext(ctx, o.stmt.fail, withToken(errorText(failErr[r.id]), r.id)...); err != nil {
			return fmt.Errorf("outbox: mark row failed: %w", err)
		}
	}
	return nil
}

func ids(rows []claimedRow) []string {
	s := make([]string, len(rows))
	for i, r := range rows {
		s[i] = r.id
	}
	return s
}

// scanWait collects the outcomes of one scan's messages until the scan
// stops waiting; outcomes after that take the commit path's way (outcome).
type scanWait struct {
	mu       sync.Mutex
	open     bool
	expected int
	results  map[string]error
	changed  chan struct{} // a result arrived (capacity 1)
}

func newScanWait() *scanWait {
	return &scanWait{open: true, results: map[string]error{}, changed: make(chan struct{}, 1)}
}

// expect counts one more message handed to the sender.
func (w *scanWait) expect() {
	w.mu.Lock()
	w.expected++
	w.mu.Unlock()
}

// take records the outcome of id if the scan still waits; it reports
// whether it did.
func (w *scanWait) take(id string, err error) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.open {
		return false
	}
	w.results[id] = err
	select {
	case w.changed <- struct{}{}:
	default:
	}
	return true
}

// wait returns the outcomes once every expected message has one or timeout
// has passed, and stops taking outcomes.
func (w *scanWait) wait(timeout time.Duration) map[string]error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		if len(w.results) >= w.expected {
			w.open = false
			w.mu.Unlock()
			return w.results
		}
		w.mu.Unlock()
		select {
		case <-w.changed:
		case <-deadline.C:
			w.mu.Lock()
			w.open = false
			w.mu.Unlock()
			return w.results
		}
	}
}

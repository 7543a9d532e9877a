package outbox

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// deleteLoop deletes the rows of acknowledged messages, many per statement:
// it lets ids gather for deleteLinger, and the ids that arrive while one
// delete runs go in the next. A failed delete
// is tried again after a back-off, up to maxDeleteTries; after that the ids
// are forgotten and the watchdog sends those rows again (the broker drops
// the copies it still remembers).
//
// On PostgreSQL each delete commits with synchronous_commit off: it does
// not wait for its WAL flush. A row whose delete a database crash undoes is
// sent again by the watchdog, as above; nothing is lost.
func (o *Outbox) deleteLoop() {
	defer o.wg.Done()
	tries, lingered := 0, false
	for {
		o.mu.Lock()
		ids := append([]string(nil), o.toDelete[:min(len(o.toDelete), maxIDsPerStatement)]...)
		o.mu.Unlock()
		if len(ids) == 0 {
			select {
			case <-o.wakeDelete:
				continue
			case <-o.deleterEnd:
				return
			}
		}
		if len(ids) < maxIDsPerStatement && !lingered {
			lingered = true
			sleepFor(o.deleterEnd, deleteLinger)
			continue
		}
		lingered = false
		err := o.deleteRows(ids)
		if err != nil {
			tries++
			if tries < maxDeleteTries {
				o.lg.Warn("delete of sent rows failed; retrying", zap.Int("rows", len(ids)), zap.Int("try", tries), zap.Error(err))
				if !sleepFor(o.deleterEnd, o.backoff(tries)) {
					tries = maxDeleteTries - 1 // closing: one last try
				}
				continue
			}
			o.lg.Error("delete of sent rows failed; the watchdog will send them again", zap.Int("rows", len(ids)), zap.Error(err))
		}
		tries = 0
		o.mu.Lock()
		// ids are a copy of toDelete's head, which only grows at its end
		// meanwhile.
		o.toDelete = append(o.toDelete[:0], o.toDelete[len(ids):]...)
		for _, id := range ids {
			delete(o.inflight, id)
		}
		o.mu.Unlock()
		if err == nil {
			o.metrics.deleted.Add(float64(len(ids)))
		}
	}
}

// deleteLinger is how long the deleter lets acknowledged ids gather before
// a delete that is not full: at a thousand commits a second, a delete per
// ten rows instead of one per row or two.
const deleteLinger = 10 * time.Millisecond

// maxDeleteTries bounds the tries of one delete.
const maxDeleteTries = 5

// deleteRows deletes the rows of ids.
func (o *Outbox) deleteRows(ids []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.cfg.sendTimeout)
	defer cancel()
	args := inList(ids)
	q := o.stmt.delete(len(args))
	if o.dialect != Postgres {
		if _, err := o.db.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("outbox: delete sent rows: %w", err)
		}
		return nil
	}
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outbox: delete sent rows: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SET LOCAL synchronous_commit TO OFF"); err != nil {
		return fmt.Errorf("outbox: delete sent rows: %w", err)
	}
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("outbox: delete sent rows: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox: delete sent rows: %w", err)
	}
	return nil
}

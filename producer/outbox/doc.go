// Package outbox sends messages if and only if a database transaction
// commits: QMQ's transactional messages for database/sql users.
//
//	ob, err := outbox.New(db, outbox.Postgres, p) // p: a *producer.Producer
//	defer ob.Close(ctx)                           // before p.Close
//	err = ob.Transact(ctx, nil, func(tx *outbox.Tx) error {
//		if _, err := tx.ExecContext(ctx, "UPDATE orders SET state = 'paid' WHERE id = $1", id); err != nil {
//			return err
//		}
//		return tx.Send(ctx, &producer.Message{Subject: "order.paid", Body: body})
//	})
//
// Tx.Send encodes the message and inserts it into the outbox table inside
// the caller's transaction. When the transaction commits the messages go to
// the producer at once (SendAsync; WithSyncSend makes Commit wait for the
// broker too); once the broker acknowledges one, its row is deleted. A
// rolled-back transaction leaves no row, so its messages are never sent. A
// message keeps the id Send gave it from the insert to the broker, so a copy
// sent again is dropped by the broker's dedupe window; one that is not
// delayed goes to the broker as the very bytes of its row
// (producer.SendEncoded).
//
// # Committing
//
// Tx embeds *sql.Tx and shadows Commit and Rollback: Commit commits and then
// hands the messages over, so it knows the commit succeeded without wrapping
// the driver. Three ways in:
//   - Transact runs a func in a transaction, rolls back on an error or a
//     panic, and commits and sends otherwise;
//   - Begin returns a Tx to Commit or Rollback yourself;
//   - Wrap takes a *sql.Tx begun elsewhere (a framework, an ORM). If that
//     code commits it, call Tx.Committed afterwards: it reads which rows are
//     visible outside the transaction and sends only those, so calling it
//     after a rollback sends nothing.
//
// Messages whose hand-over did not happen (a crash right after the commit, a
// failed send, a transaction committed without Commit or Committed) are the
// watchdog's.
//
// # Watchdog
//
// Every instance runs a watchdog unless WithoutWatchdog. It claims up to a
// batch of rows created more than its delay ago (WithDelay, default 10 s)
// whose due_ms has passed (due_ms starts as the insert time), sends them,
// waits for the broker (WithSendTimeout), then deletes the acknowledged rows
// and moves the others' due_ms by a back-off with jitter (WithRetryBackoff).
// Rows the broker refuses for good (invalid, too large, beyond the delay
// horizon) or that do not decode get state 1 and stay for an operator.
// Many instances can run watchdogs on one table; none sends a row another
// is sending:
//   - PostgreSQL: SELECT … FOR UPDATE SKIP LOCKED in a read-committed
//     transaction held until the outcome is written; a crashed instance's
//     locks end with its connection.
//   - MySQL 8, MariaDB 10.6+: a short transaction leases the rows: SELECT …
//     FOR UPDATE SKIP LOCKED names candidates, then an UPDATE sets claimed_by
//     to the scan's token and due_ms to the lease end (twice the send
//     timeout) where a candidate is still due. The UPDATE re-checks because
//     MariaDB's SKIP LOCKED under READ COMMITTED was seen handing one row to
//     two transactions.
//   - SQLite: one UPDATE … RETURNING takes the same lease.
//
// Under a lease the outcome is written only where the token still stands,
// and the rows of a watchdog that crashed come back when the lease ends.
//
// A row left behind goes out about delay + scan interval (WithScanInterval,
// default 500 ms) after its commit. Keep the delay above the time a normal
// send takes, retries included (producer.WithSendTimeout): a first send
// still under way when the watchdog sends the row too can store a second
// copy when the two reach different broker groups. Consumers that must not
// see a message twice use the consumer's idempotency hook, keyed by id.
//
// Delayed messages (DeliverAt) and tags and properties pass through
// unchanged: the producer routes the message when it is sent.
//
// # Tables
//
// CreateSchema runs the DDL below (DDL returns it; WithTable renames the
// table, default qmq_outbox). message is the encoded message
// (pkg/protocol, CRC included); times are Unix milliseconds of the
// application's clock, so instances sharing a table need clocks in step to
// well within the delay.
//
// PostgreSQL:
//
//	CREATE TABLE IF NOT EXISTS qmq_outbox (
//	    id         VARCHAR(255) NOT NULL PRIMARY KEY,
//	    subject    VARCHAR(255) NOT NULL,
//	    message    BYTEA        NOT NULL,
//	    created_ms BIGINT       NOT NULL,
//	    due_ms     BIGINT       NOT NULL,
//	    attempts   INTEGER      NOT NULL DEFAULT 0,
//	    state      SMALLINT     NOT NULL DEFAULT 0,
//	    last_error TEXT         NULL
//	);
//	CREATE INDEX IF NOT EXISTS qmq_outbox_due ON qmq_outbox (state, due_ms);
//
// MySQL 8.0.1+ and MariaDB 10.6+ (binary columns: ids compare byte for byte):
//
//	CREATE TABLE IF NOT EXISTS qmq_outbox (
//	    id         VARBINARY(255) NOT NULL PRIMARY KEY,
//	    subject    VARBINARY(255) NOT NULL,
//	    message    LONGBLOB       NOT NULL,
//	    created_ms BIGINT         NOT NULL,
//	    due_ms     BIGINT         NOT NULL,
//	    attempts   INT            NOT NULL DEFAULT 0,
//	    state      SMALLINT       NOT NULL DEFAULT 0,
//	    last_error TEXT           NULL,
//	    claimed_by VARBINARY(64)  NULL,
//	    INDEX qmq_outbox_due (state, due_ms)
//	) ENGINE=InnoDB;
//
// SQLite 3.35+:
//
//	CREATE TABLE IF NOT EXISTS qmq_outbox (
//	    id         TEXT    NOT NULL PRIMARY KEY,
//	    subject    TEXT    NOT NULL,
//	    message    BLOB    NOT NULL,
//	    created_ms INTEGER NOT NULL,
//	    due_ms     INTEGER NOT NULL,
//	    attempts   INTEGER NOT NULL DEFAULT 0,
//	    state      INTEGER NOT NULL DEFAULT 0,
//	    last_error TEXT    NULL,
//	    claimed_by TEXT    NULL
//	);
//	CREATE INDEX IF NOT EXISTS qmq_outbox_due ON qmq_outbox (state, due_ms);
//
// # Drivers
//
// Any database/sql driver works; the tests use github.com/jackc/pgx/v5/stdlib
// ("pgx"), github.com/go-sql-driver/mysql and modernc.org/sqlite. SQLite has
// one writer at a time: open it in WAL mode with a busy timeout and
// IMMEDIATE transactions (modernc.org/sqlite:
// "file:app.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"),
// or transactions that read first fail with "database is locked" when they
// write. The outbox uses up to three connections of its own at a time (the
// watchdog's, the deleter's and the row count's).
//
// On PostgreSQL the deleter commits its deletes with synchronous_commit off:
// they cost no WAL flush, and a delete that a database crash undoes only
// means the row is sent again (and dropped by the broker).
//
// # Metrics
//
// With WithRegisterer: qmq_outbox_messages_sent_total and
// qmq_outbox_send_failures_total by path (commit, watchdog),
// qmq_outbox_rows_deleted_total, qmq_outbox_scan_errors_total, and, counted
// by the watchdog every WithStatsInterval, qmq_outbox_rows_waiting,
// qmq_outbox_rows_failed and qmq_outbox_oldest_waiting_seconds (Stats
// returns the same counts). All carry the label table.
package outbox

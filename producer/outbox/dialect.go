package outbox

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Dialect names the SQL database the outbox table lives in.
type Dialect string

const (
	// Postgres is PostgreSQL 9.5 or later (FOR UPDATE SKIP LOCKED), for
	// example through github.com/jackc/pgx/v5/stdlib.
	Postgres Dialect = "postgres"
	// MySQL is MySQL 8.0.1 or later, or MariaDB 10.6 or later (FOR UPDATE
	// SKIP LOCKED), for example through github.com/go-sql-driver/mysql.
	MySQL Dialect = "mysql"
	// SQLite is SQLite 3.35 or later (RETURNING), for example through
	// modernc.org/sqlite. It has no row locks: the watchdog claims rows with
	// a lease instead.
	SQLite Dialect = "sqlite"
)

// DefaultTable is the outbox table's name unless WithTable says otherwise.
const DefaultTable = "qmq_outbox"

// Row states (column state).
const (
	stateWaiting = 0 // to be sent
	stateFailed  = 1 // the broker refused it for good; kept for an operator
)

// tableName matches a table name, optionally qualified by a schema: letters,
// digits and underscores, not starting with a digit.
var tableName = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]{0,62}\.)?[A-Za-z_][A-Za-z0-9_]{0,62}$`)

func (d Dialect) validate() error {
	switch d {
	case Postgres, MySQL, SQLite:
		return nil
	}
	return fmt.Errorf("%w: %q (want %q, %q or %q)", ErrDialect, string(d), Postgres, MySQL, SQLite)
}

// DDL returns the statements that create table (and its index) in d,
// each safe to run again. They are the ones doc.go shows.
func DDL(d Dialect, table string) ([]string, error) {
	if err := d.validate(); err != nil {
		return nil, err
	}
	if !tableName.MatchString(table) {
		return nil, fmt.Errorf("%w: %q", ErrTableName, table)
	}
	schema, base, qualified := strings.Cut(table, ".")
	if !qualified {
		schema, base = "", table
	}
	index := base + "_due" // PostgreSQL puts it in the table's schema; MySQL's are per table
	switch d {
	case Postgres:
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
    id         VARCHAR(255) NOT NULL PRIMARY KEY,
    subject    VARCHAR(255) NOT NULL,
    message    BYTEA        NOT NULL,
    created_ms BIGINT       NOT NULL,
    due_ms     BIGINT       NOT NULL,
    attempts   INTEGER      NOT NULL DEFAULT 0,
    state      SMALLINT     NOT NULL DEFAULT 0,
    last_error TEXT         NULL
)`,
			`CREATE INDEX IF NOT EXISTS ` + index + ` ON ` + table + ` (state, due_ms)`,
		}, nil
	case MySQL:
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
    id         VARBINARY(255) NOT NULL PRIMARY KEY,
    subject    VARBINARY(255) NOT NULL,
    message    LONGBLOB       NOT NULL,
    created_ms BIGINT         NOT NULL,
    due_ms     BIGINT         NOT NULL,
    attempts   INT            NOT NULL DEFAULT 0,
    state      SMALLINT       NOT NULL DEFAULT 0,
    last_error TEXT           NULL,
    claimed_by VARBINARY(64)  NULL,
    INDEX ` + index + ` (state, due_ms)
) ENGINE=InnoDB`,
		}, nil
	default:
		on := table
		if qualified { // SQLite: CREATE INDEX schema.index ON table
			index, on = schema+"."+index, base
		}
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
    id         TEXT    NOT NULL PRIMARY KEY,
    subject    TEXT    NOT NULL,
    message    BLOB    NOT NULL,
    created_ms INTEGER NOT NULL,
    due_ms     INTEGER NOT NULL,
    attempts   INTEGER NOT NULL DEFAULT 0,
    state      INTEGER NOT NULL DEFAULT 0,
    last_error TEXT    NULL,
    claimed_by TEXT    NULL
)`,
			`CREATE INDEX IF NOT EXISTS ` + index + ` ON ` + on + ` (state, due_ms)`,
		}, nil
	}
}

// statements are the outbox's SQL for one dialect and table.
type statements struct {
	insert string             // id, subject, message, created_ms, due_ms (= created_ms)
	exists func(n int) string // SELECT id … WHERE id IN (n placeholders)
	delete func(n int) string // DELETE … WHERE id IN (n placeholders)
	stats  string             // state, count, min(created_ms) by state

	// claim selects due rows: those whose due_ms has passed and that were
	// created before a cutoff (now − delay).
	//   PostgreSQL: SELECT id, message, attempts … FOR UPDATE SKIP LOCKED
	//     (now, cutoff, limit), in the transaction that later writes the
	//     outcome.
	//   MySQL: SELECT id … FOR UPDATE SKIP LOCKED (now, cutoff, limit), the
	//     candidates for claimUpdate.
	//   SQLite: UPDATE … SET claimed_by, due_ms … RETURNING id, message,
	//     attempts (token, lease until, now, cutoff, limit).
	claim string
	// claimUpdate (MySQL) leases n candidates that are still due:
	// (token, lease until, now, cutoff, ids…); claimRead then reads the
	// ones this token holds: (token, ids…).
	claimUpdate func(n int) string
	claimRead   func(n int) string

	// The outcome. PostgreSQL's rows are locked by the scan's transaction;
	// MySQL's and SQLite's are written only where claimed_by still holds the
	// scan's token, passed last.
	deleteClaimed func(n int) string // (ids…[, token])
	retry         string             // attempts+1, due_ms, last_error: (due, error, id[, token])
	fail          string             // state failed, last_error: (error, id[, token])
}

func newStatements(d Dialect, table string) statements {
	ph := func(i int) string { return "?" }
	if d == Postgres {
		ph = func(i int) string { return "$" + strconv.Itoa(i) }
	}
	list := func(first, n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(ph(first + i))
		}
		return b.String()
	}
	due := fmt.Sprintf("state = %d AND due_ms <= %s AND created_ms <= %s", stateWaiting, ph(1), ph(2))
	s := statements{
		insert: fmt.Sprintf("INSERT INTO %s (id, subject, message, created_ms, due_ms) VALUES (%s)", table, list(1, 5)),
		exists: func(n int) string { return fmt.Sprintf("SELECT id FROM %s WHERE id IN (%s)", table, list(1, n)) },
		delete: func(n int) string { return fmt.Sprintf("DELETE FROM %s WHERE id IN (%s)", table, list(1, n)) },
		stats:  fmt.Sprintf("SELECT state, COUNT(*), MIN(created_ms) FROM %s GROUP BY state", table),
	}
	switch d {
	case Postgres:
		s.claim = fmt.Sprintf("SELECT id, message, attempts FROM %s WHERE %s ORDER BY due_ms LIMIT %s FOR UPDATE SKIP LOCKED",
			table, due, ph(3))
		s.deleteClaimed = s.delete
		s.retry = fmt.Sprintf("UPDATE %s SET attempts = attempts + 1, due_ms = %s, last_error = %s WHERE id = %s", table, ph(1), ph(2), ph(3))
		s.fail = fmt.Sprintf("UPDATE %s SET state = %d, attempts = attempts + 1, last_error = %s WHERE id = %s", table, stateFailed, ph(1), ph(2))
		return s
	case MySQL:
		s.claim = fmt.Sprintf("SELECT id FROM %s WHERE %s ORDER BY due_ms LIMIT ? FOR UPDATE SKIP LOCKED", table, due)
		s.claimUpdate = func(n int) string {
			return fmt.Sprintf("UPDATE %s SET claimed_by = ?, due_ms = ? WHERE state = %d AND due_ms <= ? AND created_ms <= ? AND id IN (%s)",
				table, stateWaiting, list(1, n))
		}
		s.claimRead = func(n int) string {
			return fmt.Sprintf("SELECT id, message, attempts FROM %s WHERE claimed_by = ? AND id IN (%s)", table, list(1, n))
		}
	default:
		s.claim = fmt.Sprintf(`UPDATE %[1]s SET claimed_by = ?, due_ms = ?
WHERE id IN (SELECT id FROM %[1]s WHERE %[2]s ORDER BY due_ms LIMIT ?)
RETURNING id, message, attempts`, table, due)
	}
	s.deleteClaimed = func(n int) string {
		return fmt.Sprintf("DELETE FROM %s WHERE id IN (%s) AND claimed_by = ?", table, list(1, n))
	}
	s.retry = fmt.Sprintf("UPDATE %s SET attempts = attempts + 1, due_ms = ?, last_error = ?, claimed_by = NULL WHERE id = ? AND claimed_by = ?", table)
	s.fail = fmt.Sprintf("UPDATE %s SET state = %d, attempts = attempts + 1, last_error = ?, claimed_by = NULL WHERE id = ? AND claimed_by = ?", table, stateFailed)
	return s
}

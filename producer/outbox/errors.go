package outbox

import "errors"

var (
	// ErrDialect: the dialect is not one of Postgres, MySQL or SQLite.
	ErrDialect = errors.New("outbox: unknown dialect")
	// ErrTableName: the table name is not a plain SQL identifier
	// (optionally schema-qualified).
	ErrTableName = errors.New("outbox: bad table name")
	// ErrTxDone: the transaction was already committed or rolled back.
	ErrTxDone = errors.New("outbox: transaction already committed or rolled back")
	// ErrClosed: the outbox is closed.
	ErrClosed = errors.New("outbox: closed")
)

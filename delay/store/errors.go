package store

import (
	"errors"

	"github.com/qmq-go/qmq/pkg/fsutil"
)

// Errors returned by the store. Append reports per-message failures as
// *protocol.Error values (match them with errors.Is against
// protocol.ErrInvalid, protocol.ErrTooLarge, protocol.ErrBeyondHorizon,
// protocol.ErrStoreError and protocol.ErrShuttingDown); the sentinels below
// are for Open and the maintenance calls.
var (
	// ErrLocked: another process (or another open Store) holds the store
	// directory.
	ErrLocked = fsutil.ErrLocked
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("delay/store: closed")
	// ErrCorrupt: a file holds bytes that fail their checksum or structure
	// where valid data must be.
	ErrCorrupt = errors.New("delay/store: corrupt data")
)

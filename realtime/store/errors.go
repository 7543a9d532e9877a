package store

import "errors"

// Errors of the store; match them with errors.Is. Invalid or oversized
// messages get *protocol.Error values (StatusInvalid, StatusTooLarge) in
// their Result instead.
var (
	// ErrClosed means the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrCorrupt means recovery found damaged data in the middle of a log and
	// Options.SkipCorrupt is off, or a read found a record that fails its CRC.
	ErrCorrupt = errors.New("store: corrupt data")
	// ErrIO wraps a failed write or sync (for example a full disk, which also
	// wraps syscall.ENOSPC). Appends that fail with it were not stored; the
	// store retries on the next append.
	ErrIO = errors.New("store: write failed")
	// ErrUnknownSubject means no message of the subject was ever stored.
	ErrUnknownSubject = errors.New("store: unknown subject")
	// ErrUnknownGroup means the consumer group has never pulled the subject.
	ErrUnknownGroup = errors.New("store: unknown consumer group")
	// ErrUnknownConsumer means the consumer has no state in the group.
	ErrUnknownConsumer = errors.New("store: unknown consumer")
	// ErrInvalidRequest means a pull, ack or reset names an invalid subject,
	// group or consumer, or an empty range.
	ErrInvalidRequest = errors.New("store: invalid request")
)

package store

import "errors"

// Errors of the store; match them with errors.Is. Invalid or oversized
// messages get *protocol.Error values (StatusInvalid, StatusTooLarge) in
// their Result instead.
var (
	// ErrWouldBlock means AppendAsync with NoWait found the append queue full and
	// queued nothing.
	ErrWouldBlock = errors.New("store: append queue full")
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
	// ErrReplica means the store is a replica (Options.Replica): it takes
	// its changes from its master's logs, never from clients.
	ErrReplica = errors.New("store: replica refuses changes from clients")
	// ErrNotReplica means ReplicateMessages or ReplicateActions was called
	// on a store that is not a replica.
	ErrNotReplica = errors.New("store: not a replica")
	// ErrBadOffset means a log read asked for an offset past the committed
	// end or one where no record starts.
	ErrBadOffset = errors.New("store: bad log offset")
	// ErrBadChunk means a replicated chunk holds bytes that are not valid
	// records.
	ErrBadChunk = errors.New("store: bad replicated chunk")
	// ErrReplicaMismatch means a replicated chunk does not continue this
	// copy's log at the same offsets.
	ErrReplicaMismatch = errors.New("store: replicated chunk does not continue this copy")
	// ErrReplicaGap means the master no longer keeps actions this copy
	// lacks; the copy must start again from empty.
	ErrReplicaGap = errors.New("store: master's action log no longer covers this copy")
)

package protocol

import (
	"context"
	"errors"
	"strconv"
)

// Status is the code of a response, and of each message in a send response.
type Status uint16

const (
	// StatusOK: the request (or message) succeeded.
	StatusOK Status = 0
	// StatusUnknownCommand: the server does not serve this command.
	StatusUnknownCommand Status = 1
	// StatusBadRequest: the request body could not be decoded.
	StatusBadRequest Status = 2
	// StatusInvalid: a message, subject, group or consumer id breaks a rule.
	StatusInvalid Status = 3
	// StatusTooLarge: a message is over the server's size limit.
	StatusTooLarge Status = 4
	// StatusDuplicate: the message id was already stored (counts as success).
	StatusDuplicate Status = 5
	// StatusReadonly: the broker group takes no new messages now.
	StatusReadonly Status = 6
	// StatusNotMaster: the server is a slave or has been fenced.
	StatusNotMaster Status = 7
	// StatusNotRouted: the subject is not routed to this broker group.
	StatusNotRouted Status = 8
	// StatusStoreError: the server could not store the message.
	StatusStoreError Status = 9
	// StatusBusy: the server sheds load; try again or elsewhere.
	StatusBusy Status = 10
	// StatusRetryLater: the request could not be served before its deadline.
	StatusRetryLater Status = 11
	// StatusUnknownGroup: the consumer group or consumer is not known here.
	StatusUnknownGroup Status = 12
	// StatusStaleEpoch: the request carried an epoch older than the server's.
	StatusStaleEpoch Status = 13
	// StatusShuttingDown: the server is closing.
	StatusShuttingDown Status = 14
	// StatusNotFound: the named object does not exist.
	StatusNotFound Status = 15
	// StatusBeyondHorizon: a delayed message is due further ahead than the
	// delay server keeps messages.
	StatusBeyondHorizon Status = 16
	// StatusUnavailable: no server can take the request now.
	StatusUnavailable Status = 17
	// StatusInternal: an unexpected server error.
	StatusInternal Status = 18
	// StatusUnauthenticated: the connection has not proven who it is (no
	// credential, a wrong one, or an identity the server does not know), and
	// the server requires it.
	StatusUnauthenticated Status = 19
	// StatusForbidden: the connection's identity may not do this (publish to
	// this subject, consume as this group, an admin command); the message
	// names what was refused.
	StatusForbidden Status = 20
)

var statusNames = map[Status]string{
	StatusOK:              "ok",
	StatusUnknownCommand:  "unknown command",
	StatusBadRequest:      "bad request",
	StatusInvalid:         "invalid",
	StatusTooLarge:        "too large",
	StatusDuplicate:       "duplicate",
	StatusReadonly:        "readonly",
	StatusNotMaster:       "not master",
	StatusNotRouted:       "subject not routed here",
	StatusStoreError:      "store error",
	StatusBusy:            "busy",
	StatusRetryLater:      "retry later",
	StatusUnknownGroup:    "unknown group",
	StatusStaleEpoch:      "stale epoch",
	StatusShuttingDown:    "shutting down",
	StatusNotFound:        "not found",
	StatusBeyondHorizon:   "beyond horizon",
	StatusUnavailable:     "unavailable",
	StatusInternal:        "internal error",
	StatusUnauthenticated: "unauthenticated",
	StatusForbidden:       "forbidden",
}

// String returns the status's name, or its number when unknown.
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// Success reports whether s means the message is stored (ok or duplicate).
func (s Status) Success() bool { return s == StatusOK || s == StatusDuplicate }

// Retryable reports whether a request or message that failed with s may
// succeed if sent again, here later or to another broker group.
func (s Status) Retryable() bool {
	switch s {
	case StatusReadonly, StatusNotMaster, StatusNotRouted, StatusStoreError, StatusBusy,
		StatusRetryLater, StatusStaleEpoch, StatusShuttingDown, StatusUnavailable:
		return true
	}
	return false
}

// Error is a failure that carries a protocol status. Two *Error values match
// under errors.Is when their statuses are equal, so callers test against the
// sentinels below: errors.Is(err, protocol.ErrReadonly).
type Error struct {
	Status  Status
	Message string
}

// Error returns "qmq: <status>" or "qmq: <status>: <message>".
func (e *Error) Error() string {
	if e.Message == "" {
		return "qmq: " + e.Status.String()
	}
	return "qmq: " + e.Status.String() + ": " + e.Message
}

// Is matches any *Error with the same status.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == e.Status
}

// Errorf returns an *Error with status s and a message.
func Errorf(s Status, msg string) *Error { return &Error{Status: s, Message: msg} }

// Sentinels, one per non-OK status; match with errors.Is.
var (
	ErrUnknownCommand  = &Error{Status: StatusUnknownCommand}
	ErrBadRequest      = &Error{Status: StatusBadRequest}
	ErrInvalid         = &Error{Status: StatusInvalid}
	ErrTooLarge        = &Error{Status: StatusTooLarge}
	ErrDuplicate       = &Error{Status: StatusDuplicate}
	ErrReadonly        = &Error{Status: StatusReadonly}
	ErrNotMaster       = &Error{Status: StatusNotMaster}
	ErrNotRouted       = &Error{Status: StatusNotRouted}
	ErrStoreError      = &Error{Status: StatusStoreError}
	ErrBusy            = &Error{Status: StatusBusy}
	ErrRetryLater      = &Error{Status: StatusRetryLater}
	ErrUnknownGroup    = &Error{Status: StatusUnknownGroup}
	ErrStaleEpoch      = &Error{Status: StatusStaleEpoch}
	ErrShuttingDown    = &Error{Status: StatusShuttingDown}
	ErrNotFound        = &Error{Status: StatusNotFound}
	ErrBeyondHorizon   = &Error{Status: StatusBeyondHorizon}
	ErrUnavailable     = &Error{Status: StatusUnavailable}
	ErrInternal        = &Error{Status: StatusInternal}
	ErrUnauthenticated = &Error{Status: StatusUnauthenticated}
	ErrForbidden       = &Error{Status: StatusForbidden}
)

// StatusError returns nil for StatusOK and an *Error carrying s and msg
// otherwise.
func StatusError(s Status, msg string) error {
	if s == StatusOK {
		return nil
	}
	return &Error{Status: s, Message: msg}
}

// StatusOf maps an error to the status a server should answer with: nil is
// StatusOK, a wrapped *Error keeps its status, a context deadline is
// StatusRetryLater, a body that does not decode is StatusBadRequest, a
// checksum mismatch is StatusInvalid, and anything else is StatusInternal.
func StatusOf(err error) Status {
	if err == nil {
		return StatusOK
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Status
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return StatusRetryLater
	case errors.Is(err, ErrTruncated), errors.Is(err, ErrTrailingBytes), errors.Is(err, ErrMessageVersion):
		return StatusBadRequest
	case errors.Is(err, ErrChecksum):
		return StatusInvalid
	}
	return StatusInternal
}

// Decoding errors. The frame-level ones mean the byte stream is unusable and
// the connection must be closed; the others are answered with
// StatusBadRequest or StatusInvalid.
var (
	// ErrShortHeader: fewer than HeaderSize bytes are buffered (wait for more).
	ErrShortHeader = errors.New("protocol: short header")
	// ErrShortFrame: the header is whole but the body is not yet (wait for more).
	ErrShortFrame = errors.New("protocol: short frame")
	// ErrBadMagic: the frame does not start with Magic.
	ErrBadMagic = errors.New("protocol: bad magic")
	// ErrUnknownVersion: the frame's version is not Version.
	ErrUnknownVersion = errors.New("protocol: unknown version")
	// ErrBadFlags: the frame sets flags this version does not define.
	ErrBadFlags = errors.New("protocol: unknown flags")
	// ErrFrameTooLarge: the body length is over the maximum frame size.
	ErrFrameTooLarge = errors.New("protocol: frame too large")
	// ErrTruncated: a body or message ends before its fields do.
	ErrTruncated = errors.New("protocol: truncated")
	// ErrTrailingBytes: a body has bytes after its last field.
	ErrTrailingBytes = errors.New("protocol: trailing bytes")
	// ErrChecksum: a message's CRC-32C does not match its bytes.
	ErrChecksum = errors.New("protocol: checksum mismatch")
	// ErrMessageVersion: a message's encoding version is unknown.
	ErrMessageVersion = errors.New("protocol: unknown message version")
)

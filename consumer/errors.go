package consumer

import (
	"errors"
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

var (
	// ErrClosed: the consumer or subscription is closed.
	ErrClosed = errors.New("consumer: closed")
	// ErrNoResolver: New was given no way to find broker groups.
	ErrNoResolver = errors.New("consumer: no resolver (use WithMetaServers, WithResolver or WithBrokers)")
	// ErrAlreadySubscribed: this consumer already subscribes (subject, group).
	ErrAlreadySubscribed = errors.New("consumer: already subscribed")
)

// What a broker refused a pull or an ack for; match with errors.Is. They
// are pkg/protocol's sentinels, here so a caller needs no other import.
var (
	// ErrUnauthenticated: the broker requires an identity the consumer did
	// not prove (WithCredentials, or a client certificate).
	ErrUnauthenticated = protocol.ErrUnauthenticated
	// ErrForbidden: the consumer's identity may not consume the subject as
	// the group.
	ErrForbidden = protocol.ErrForbidden
	// ErrInvalid: a subject, group or consumer id breaks a naming rule.
	ErrInvalid = protocol.ErrInvalid
	// ErrUnavailable: no broker group could serve the request.
	ErrUnavailable = protocol.ErrUnavailable
)

// retryAfterError asks for a retry at a chosen time.
type retryAfterError struct {
	after time.Duration
	cause error
}

func (e *retryAfterError) Error() string {
	if e.cause == nil {
		return fmt.Sprintf("consumer: retry after %v", e.after)
	}
	return fmt.Sprintf("consumer: retry after %v: %v", e.after, e.cause)
}

func (e *retryAfterError) Unwrap() error { return e.cause }

// RetryAfter returns an error a handler returns to have its message
// delivered again after d (through the delay server when the cluster has
// one). cause may be nil.
func RetryAfter(d time.Duration, cause error) error {
	if d < 0 {
		d = 0
	}
	return &retryAfterError{after: d, cause: cause}
}

// retryDelay reports the delay a handler asked for with RetryAfter.
func retryDelay(err error) (time.Duration, bool) {
	var ra *retryAfterError
	if errors.As(err, &ra) {
		return ra.after, true
	}
	return 0, false
}

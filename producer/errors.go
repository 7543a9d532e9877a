package producer

import (
	"errors"
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

var (
	// ErrQueueFull: the send queue is full and the producer does not block
	// (WithNonBlocking).
	ErrQueueFull = errors.New("producer: queue full")
	// ErrClosed: the producer is closed; the message was not sent.
	ErrClosed = errors.New("producer: closed")
	// ErrSendTimeout: the message could not be stored before its send
	// timeout; the error also wraps the last failure.
	ErrSendTimeout = errors.New("producer: send timed out")
	// ErrNoResolver: New was given no way to find broker groups.
	ErrNoResolver = errors.New("producer: no resolver (use WithMetaServers, WithResolver or WithBrokers)")
)

// What a broker refused a message for; match with errors.Is. They are
// pkg/protocol's sentinels, here so a caller needs no other import.
var (
	// ErrBeyondHorizon: a delayed message is due further ahead than the
	// delay group keeps messages (qmq-delay --horizon, DefaultDelayHorizon
	// unless configured); the error names the limit.
	ErrBeyondHorizon = protocol.ErrBeyondHorizon
	// ErrTooLarge: the message is over the broker's size limit.
	ErrTooLarge = protocol.ErrTooLarge
	// ErrInvalid: the message, its subject or a tag breaks a rule.
	ErrInvalid = protocol.ErrInvalid
	// ErrUnauthenticated: the broker requires an identity the producer did
	// not prove (WithCredentials, or a client certificate).
	ErrUnauthenticated = protocol.ErrUnauthenticated
	// ErrForbidden: the producer's identity may not publish to the subject.
	ErrForbidden = protocol.ErrForbidden
	// ErrUnavailable: no broker group could take the message.
	ErrUnavailable = protocol.ErrUnavailable
)

// DefaultDelayHorizon is how far ahead a delayed message may be due when
// the delay group keeps its default horizon: 731 days.
const DefaultDelayHorizon = protocol.DefaultDelayHorizon

// refusal is the error of the message raw (encoded) that broker group
// refused with st; one beyond the horizon says how far ahead it was due and
// names the limit.
func refusal(st protocol.Status, group string, raw []byte) error {
	msg := "group " + group
	if st == protocol.StatusBeyondHorizon {
		if v, err := protocol.ParseMessage(raw); err == nil && v.DeliverAtMillis != 0 {
			deliverAt := time.UnixMilli(v.DeliverAtMillis)
			msg += fmt.Sprintf(": due %s, %d days ahead", deliverAt.UTC().Format(time.RFC3339), int(time.Until(deliverAt)/(24*time.Hour)))
		}
		msg += fmt.Sprintf(", further than the delay group's horizon (qmq-delay --horizon, %d days unless configured)",
			int(protocol.DefaultDelayHorizon/(24*time.Hour)))
	}
	return protocol.StatusError(st, msg)
}

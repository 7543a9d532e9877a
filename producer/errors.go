package producer

import "errors"

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
	ErrNoResolver = errors.New("producer: no resolver (use WithResolver or WithBrokers)")
)

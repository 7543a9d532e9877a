package transport

import (
	"errors"
)

// Transport failures. A response with a non-OK status is not one of these:
// it comes back as a *protocol.Error (errors.Is(err, protocol.ErrReadonly)).
// Each sentinel says whether the request may have reached the server;
// NotSent tells the two kinds apart.
var (
	// ErrBreakerOpen: the address's circuit breaker is open (or half-open
	// with its probes in flight). The request was not sent. It wraps
	// gobreaker's ErrOpenState or ErrTooManyRequests.
	ErrBreakerOpen = errors.New("transport: circuit breaker open")
	// ErrDial: the address could not be dialled, now or within the redial
	// back-off. The request was not sent.
	ErrDial = errors.New("transport: dial failed")
	// ErrRequestTooLarge: the request body is over MaxFrameSize. The request
	// was not sent.
	ErrRequestTooLarge = errors.New("transport: request too large")
	// ErrClosed: the Client is closed. The request was not sent.
	ErrClosed = errors.New("transport: client closed")
	// ErrConnClosed: the connection dropped (or the client closed) while the
	// request was in flight. The request may have reached the server.
	ErrConnClosed = errors.New("transport: connection closed")
	// ErrTimeout: no response came before the request's deadline. It also
	// matches context.DeadlineExceeded. The request may have reached the
	// server.
	ErrTimeout = errors.New("transport: request timed out")
	// ErrInvalidOptions: an Options field cannot work; the message names it.
	ErrInvalidOptions = errors.New("transport: invalid options")
)

// NotSent reports whether err means the request certainly did not reach
// the server, so sending it elsewhere cannot duplicate it.
func NotSent(err error) bool {
	return errors.Is(err, ErrBreakerOpen) || errors.Is(err, ErrDial) ||
		errors.Is(err, ErrRequestTooLarge) || errors.Is(err, ErrClosed)
}

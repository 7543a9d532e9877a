package netserver

import "errors"

var (
	// ErrInvalidOptions: an Options field cannot work; the message names it.
	ErrInvalidOptions = errors.New("netserver: invalid options")
	// ErrNotStarted: the server has not been started, or failed to start.
	ErrNotStarted = errors.New("netserver: not started")
	// ErrAlreadyStarted: Start was called twice.
	ErrAlreadyStarted = errors.New("netserver: already started")
	// ErrServerClosed: Start was called after Close.
	ErrServerClosed = errors.New("netserver: server closed")
)

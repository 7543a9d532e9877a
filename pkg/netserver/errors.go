package netserver

import (
	"errors"

	"github.com/qmq-go/qmq/pkg/exposure"
)

var (
	// ErrInvalidOptions: an Options field cannot work; the message names it.
	ErrInvalidOptions = errors.New("netserver: invalid options")
	// ErrNotStarted: the server has not been started, or failed to start.
	ErrNotStarted = errors.New("netserver: not started")
	// ErrAlreadyStarted: Start was called twice.
	ErrAlreadyStarted = errors.New("netserver: already started")
	// ErrServerClosed: Start was called after Close.
	ErrServerClosed = errors.New("netserver: server closed")
	// ErrInsecureListener: Options.Addr is not a loopback address and the
	// server has no TLS or does not require authentication, and Insecure
	// is not set; the message names the address and what is missing. It
	// is exposure.ErrInsecureListener, which other listeners share.
	ErrInsecureListener = exposure.ErrInsecureListener
)

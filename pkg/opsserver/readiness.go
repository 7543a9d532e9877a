package opsserver

import (
	"errors"
	"sync/atomic"
)

// Readiness is a server's lifecycle as /readyz reports it: starting until
// SetReady, ready until SetClosing, then shutting down. Pass its Err as
// Options.Ready. Its methods are safe for concurrent use.
type Readiness struct {
	ready, closing atomic.Bool
}

var (
	errStarting     = errors.New("starting")
	errShuttingDown = errors.New("shutting down")
)

// SetReady marks the server as serving.
func (r *Readiness) SetReady() { r.ready.Store(true) }

// SetClosing marks the server as shutting down.
func (r *Readiness) SetClosing() { r.closing.Store(true) }

// Ready reports whether SetReady was called.
func (r *Readiness) Ready() bool { return r.ready.Load() }

// Closing reports whether SetClosing was called.
func (r *Readiness) Closing() bool { return r.closing.Load() }

// Err is nil while the server is ready, else why it is not.
func (r *Readiness) Err() error {
	switch {
	case r.closing.Load():
		return errShuttingDown
	case !r.ready.Load():
		return errStarting
	}
	return nil
}

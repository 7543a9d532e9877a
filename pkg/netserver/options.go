package netserver

import (
	"fmt"
	"net"
	"runtime"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// Options configure a Server. A zero field takes the default written next to
// it; Validate rejects values that cannot work.
type Options struct {
	// Addr is the TCP address to listen on, host:port. Port 0 picks a free
	// port; Server.Addr reports it. Default "127.0.0.1:0".
	Addr string
	// MaxFrameSize bounds a request's body in bytes; a larger frame closes the
	// connection. Default protocol.DefaultMaxFrameSize (16 MiB).
	MaxFrameSize int
	// MaxConns bounds the open connections; a connection over the limit is
	// closed as soon as it is accepted, with a logged reason. Default 10000.
	MaxConns int
	// MaxOutboundBytes bounds the reply bytes a connection may have queued
	// and unsent (a client that does not read its replies); past it the
	// connection is closed with a logged reason. Default 64 MiB.
	MaxOutboundBytes int
	// MaxInFlight bounds the requests of one connection that the handler has
	// not yet answered; a request over the limit is answered with
	// StatusBusy at once. Default 4096.
	MaxInFlight int
	// EventLoops is the number of gnet event loops. Default one per four
	// CPUs, at least one: the loops only frame bytes and write replies, and
	// the other cores are left to handlers (on the 2-core machine the rpc
	// bench ran slower with two loops than with one; see doc.go).
	EventLoops int
	// ReadBufferSize is the bytes gnet reads from a socket at a time (rounded
	// up to a power of two). Default 64 KiB.
	ReadBufferSize int
	// TCPKeepAlive is the keep-alive period of accepted connections; negative
	// turns keep-alive off. Default 1 minute.
	TCPKeepAlive time.Duration
	// Spin is how long an event loop that serves a single connection polls
	// it for the next request after answering, on the loop, every request
	// it read, before going back to wait in the kernel (see "Spin" in
	// doc.go). Negative turns it off. Default 30µs; at most 1ms.
	Spin time.Duration
}

// Defaults used for zero Options fields.
const (
	DefaultAddr             = "127.0.0.1:0"
	DefaultMaxConns         = 10000
	DefaultMaxOutboundBytes = 64 << 20
	DefaultMaxInFlight      = 4096
	DefaultReadBufferSize   = 64 << 10
	DefaultTCPKeepAlive     = time.Minute
	DefaultSpin             = 30 * time.Microsecond
	MaxSpin                 = time.Millisecond // the longest Spin Validate accepts
)

// withDefaults returns o with every zero field set to its default.
func (o Options) withDefaults() Options {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.MaxFrameSize == 0 {
		o.MaxFrameSize = protocol.DefaultMaxFrameSize
	}
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.MaxOutboundBytes == 0 {
		o.MaxOutboundBytes = DefaultMaxOutboundBytes
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.EventLoops == 0 {
		o.EventLoops = max(1, runtime.NumCPU()/4)
	}
	if o.ReadBufferSize == 0 {
		o.ReadBufferSize = DefaultReadBufferSize
	}
	if o.TCPKeepAlive == 0 {
		o.TCPKeepAlive = DefaultTCPKeepAlive
	}
	if o.Spin == 0 {
		o.Spin = DefaultSpin
	}
	return o
}

// Validate reports the first setting that cannot work, naming it. Zero
// fields are valid (they take their defaults).
func (o Options) Validate() error {
	o = o.withDefaults()
	if _, _, err := net.SplitHostPort(o.Addr); err != nil {
		return fmt.Errorf("%w: Addr %q: %v", ErrInvalidOptions, o.Addr, err)
	}
	switch {
	case o.MaxFrameSize < 0:
		return fmt.Errorf("%w: MaxFrameSize %d is negative", ErrInvalidOptions, o.MaxFrameSize)
	case o.MaxConns < 0:
		return fmt.Errorf("%w: MaxConns %d is negative", ErrInvalidOptions, o.MaxConns)
	case o.MaxOutboundBytes < 0:
		return fmt.Errorf("%w: MaxOutboundBytes %d is negative", ErrInvalidOptions, o.MaxOutboundBytes)
	case o.MaxInFlight < 0:
		return fmt.Errorf("%w: MaxInFlight %d is negative", ErrInvalidOptions, o.MaxInFlight)
	case o.EventLoops < 0:
		return fmt.Errorf("%w: EventLoops %d is negative", ErrInvalidOptions, o.EventLoops)
	case o.ReadBufferSize < 0:
		return fmt.Errorf("%w: ReadBufferSize %d is negative", ErrInvalidOptions, o.ReadBufferSize)
	case o.Spin > MaxSpin:
		return fmt.Errorf("%w: Spin %v is over %v (the loop serves nothing else meanwhile)", ErrInvalidOptions, o.Spin, MaxSpin)
	}
	return nil
}

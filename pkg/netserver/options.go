package netserver

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"runtime"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/exposure"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// Authenticator is what a server checks connections against;
// *auth.Authority is one. Its methods are called concurrently.
type Authenticator interface {
	// Authenticate checks a CmdAuth credential (slow: a server calls it
	// off the event loop).
	Authenticate(name, secret string) (*auth.Principal, error)
	// Certificate names the identity of a verified TLS client certificate.
	Certificate(cert *x509.Certificate) (*auth.Principal, error)
	// Refresh returns what p is under the current policy, or an error when
	// its identity was removed or disabled.
	Refresh(p *auth.Principal) (*auth.Principal, error)
	// Version is the current policy's version; a change makes every
	// connection refresh its principal on its next request. It must be
	// cheap (an atomic load).
	Version() uint64
}

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

	// TLS, when set, makes the server speak TLS: it listens through
	// crypto/tls and serves each connection on goroutines of its own
	// instead of gnet (see "TLS" in doc.go). The config is used for every
	// handshake as it is then, so certificates are reloaded by the
	// config's GetCertificate or GetConfigForClient. Client certificates
	// name identities when ClientAuth verifies them
	// (tls.VerifyClientCertIfGiven or RequireAndVerifyClientCert with
	// ClientCAs). Default nil: plaintext.
	TLS *tls.Config
	// HandshakeTimeout bounds a TLS handshake. Default 10s.
	HandshakeTimeout time.Duration
	// Auth checks credentials (CmdAuth) and client certificates, and
	// refreshes identities when its policy changes. Default nil: CmdAuth
	// is answered with the open identity.
	Auth Authenticator
	// RequireAuth refuses every request but CmdPing and CmdAuth with
	// StatusUnauthenticated until the connection has an identity (see
	// "Authentication" in doc.go). It needs Auth. Default false: every
	// connection runs as auth.Open.
	RequireAuth bool
	// Insecure lets the server listen on a non-loopback address without
	// TLS and RequireAuth (see "Exposure" in doc.go). Default false.
	Insecure bool
	// FramePoolBytes bounds the idle buffers kept for large frames (frames
	// over ReadBufferSize, up to 4 MiB), which come back when a handler
	// calls Request.Release (see "Large frames" in doc.go); an idle server
	// drops them after 10 s. Negative turns the pool off: every large frame
	// gets a new buffer. Default 32 MiB.
	FramePoolBytes int64
	// MaxPartialBytes bounds the bytes the server holds in incomplete
	// frames over all its connections; a connection that would take it
	// past the bound is answered StatusBusy and closed. It must be at
	// least MaxFrameSize. Default 256 MiB.
	MaxPartialBytes int64
	// IdleTimeout closes a connection that has had no request in
	// progress, nothing in flight and no bytes for this long. Negative
	// turns it off. Default 10 minutes (clients close idle connections
	// after 5).
	IdleTimeout time.Duration
	// MinReadRate is the slowest a frame in progress may arrive, in bytes
	// per second, measured over ReadRateWindow; a slower connection (a
	// slowloris, or a header and then nothing) is closed. Negative turns
	// it off. Default 4096.
	MinReadRate int
	// ReadRateWindow is the span MinReadRate is measured over. Default
	// 20s; at least 10ms.
	ReadRateWindow time.Duration
	// MaxConnsPerIdentity bounds the open connections of one
	// authenticated identity (with RequireAuth): one more is answered
	// StatusBusy and closed (its CmdAuth), or closed after its handshake
	// (its client certificate). Default 1000.
	MaxConnsPerIdentity int
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

	DefaultHandshakeTimeout    = 10 * time.Second
	DefaultMaxPartialBytes     = 256 << 20
	DefaultFramePoolBytes      = 32 << 20
	DefaultIdleTimeout         = 10 * time.Minute
	DefaultMinReadRate         = 4096
	DefaultReadRateWindow      = 20 * time.Second
	MinReadRateWindow          = 10 * time.Millisecond // the shortest ReadRateWindow Validate accepts
	DefaultMaxConnsPerIdentity = 1000
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
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.FramePoolBytes == 0 {
		o.FramePoolBytes = DefaultFramePoolBytes
	}
	if o.MaxPartialBytes == 0 {
		o.MaxPartialBytes = DefaultMaxPartialBytes
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MinReadRate == 0 {
		o.MinReadRate = DefaultMinReadRate
	}
	if o.ReadRateWindow == 0 {
		o.ReadRateWindow = DefaultReadRateWindow
	}
	if o.MaxConnsPerIdentity == 0 {
		o.MaxConnsPerIdentity = DefaultMaxConnsPerIdentity
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
	case o.HandshakeTimeout < 0:
		return fmt.Errorf("%w: HandshakeTimeout %v is negative", ErrInvalidOptions, o.HandshakeTimeout)
	case o.RequireAuth && o.Auth == nil:
		return fmt.Errorf("%w: RequireAuth without Auth (nothing to check identities against)", ErrInvalidOptions)
	case o.MaxPartialBytes < int64(o.MaxFrameSize):
		return fmt.Errorf("%w: MaxPartialBytes %d is under MaxFrameSize %d (a frame of the largest size could never arrive)",
			ErrInvalidOptions, o.MaxPartialBytes, o.MaxFrameSize)
	case o.FramePoolBytes > 0 && o.FramePoolBytes < framePoolMinClass:
		return fmt.Errorf("%w: FramePoolBytes %d is under the smallest pooled buffer (%d; negative turns the pool off)",
			ErrInvalidOptions, o.FramePoolBytes, framePoolMinClass)
	case o.ReadRateWindow < MinReadRateWindow:
		return fmt.Errorf("%w: ReadRateWindow %v is under %v", ErrInvalidOptions, o.ReadRateWindow, MinReadRateWindow)
	case o.MaxConnsPerIdentity < 0:
		return fmt.Errorf("%w: MaxConnsPerIdentity %d is negative", ErrInvalidOptions, o.MaxConnsPerIdentity)
	}
	if err := exposure.Check(o.Addr, o.TLS != nil, o.RequireAuth, o.Insecure); err != nil {
		return fmt.Errorf("netserver: %w", err)
	}
	return nil
}

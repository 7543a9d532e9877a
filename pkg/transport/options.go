package transport

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// Options configure a Client. A zero field takes the default written next
// to it; Validate rejects values that cannot work.
type Options struct {
	// DialTimeout bounds one dial of a server address. Default 3 s.
	DialTimeout time.Duration
	// RequestTimeout bounds a request whose context has no deadline, and a
	// Go request given no timeout. Default 5 s.
	RequestTimeout time.Duration
	// WriteTimeout bounds one write of queued requests to a connection; a
	// server that stops reading for this long has its connection closed
	// (its pending requests fail with ErrConnClosed). Default 10 s.
	WriteTimeout time.Duration
	// ProbeTimeout: when a request times out and nothing at all was read
	// from its connection since it was sent, the connection is sent a ping,
	// and closed (the next request dials afresh) unless something is read
	// from it within ProbeTimeout (doc.go, "Unresponsive connections").
	// Default 1 s; negative: never probe, a timeout keeps the connection.
	ProbeTimeout time.Duration
	// MaxFrameSize bounds a response body and a request body in bytes; a
	// larger response closes the connection. Default
	// protocol.DefaultMaxFrameSize (16 MiB).
	MaxFrameSize int
	// RedialBackoffMin is the wait after the first failed dial of an address
	// before the next dial; calls meanwhile fail fast with ErrDial. The wait
	// doubles with every failure up to RedialBackoffMax and resets when a
	// dial succeeds. Defaults 50 ms and 2 s.
	RedialBackoffMin time.Duration
	RedialBackoffMax time.Duration
	// IdleTimeout: an address with no request in flight and none sent for
	// this long has its connection closed and its state (breaker included)
	// forgotten. Default 5 minutes.
	IdleTimeout time.Duration
	// Spin: a Call that reads its own response (a lone request, as a
	// producer's synchronous Send is) polls the socket without blocking for
	// up to Spin before it blocks in the read, so an answer that comes within
	// microseconds does not wait for the thread to be woken (pkg/busypoll;
	// a connection whose answers keep coming later stops spinning). Default
	// 0: off.
	Spin time.Duration

	// TLS makes every connection TLS, configured by this client config
	// (pkg/tlsconfig.Client builds one from PEM files and follows their
	// changes). A config without ServerName verifies each server under the
	// host of its address. nil: plaintext.
	TLS *tls.Config
	// Credentials, when set, prove who the client is on every new
	// connection: the connection sends them (protocol.CmdAuth) before any
	// request and is used only once the server accepts them; a refusal
	// fails the dial with an error that matches protocol.ErrUnauthenticated
	// and names the identity. Send them over TLS: the secret travels in the
	// frame. nil: none (a TLS client certificate may prove the identity).
	Credentials *auth.Credentials

	// BreakerFailures is how many consecutive transport failures (dial
	// errors, timeouts, dropped connections) open an address's breaker.
	// Default 5.
	BreakerFailures uint32
	// BreakerOpenTimeout is how long an open breaker refuses requests before
	// it lets probes through (half-open). Default 1 s.
	BreakerOpenTimeout time.Duration
	// BreakerProbes is how many requests a half-open breaker lets through;
	// that many successes close it, one failure opens it again. Default 1.
	BreakerProbes uint32
	// BreakerInterval is how often a closed breaker clears its counts;
	// negative never clears them. Default 10 s.
	BreakerInterval time.Duration
}

// Defaults used for zero Options fields.
const (
	DefaultDialTimeout        = 3 * time.Second
	DefaultRequestTimeout     = 5 * time.Second
	DefaultWriteTimeout       = 10 * time.Second
	DefaultRedialBackoffMin   = 50 * time.Millisecond
	DefaultRedialBackoffMax   = 2 * time.Second
	DefaultIdleTimeout        = 5 * time.Minute
	DefaultProbeTimeout       = time.Second
	DefaultBreakerFailures    = 5
	DefaultBreakerOpenTimeout = time.Second
	DefaultBreakerProbes      = 1
	DefaultBreakerInterval    = 10 * time.Second
)

func (o Options) withDefaults() Options {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	set(&o.DialTimeout, DefaultDialTimeout)
	set(&o.RequestTimeout, DefaultRequestTimeout)
	set(&o.WriteTimeout, DefaultWriteTimeout)
	set(&o.RedialBackoffMin, DefaultRedialBackoffMin)
	set(&o.RedialBackoffMax, DefaultRedialBackoffMax)
	set(&o.IdleTimeout, DefaultIdleTimeout)
	set(&o.ProbeTimeout, DefaultProbeTimeout)
	set(&o.BreakerOpenTimeout, DefaultBreakerOpenTimeout)
	set(&o.BreakerInterval, DefaultBreakerInterval)
	if o.MaxFrameSize == 0 {
		o.MaxFrameSize = protocol.DefaultMaxFrameSize
	}
	if o.BreakerFailures == 0 {
		o.BreakerFailures = DefaultBreakerFailures
	}
	if o.BreakerProbes == 0 {
		o.BreakerProbes = DefaultBreakerProbes
	}
	return o
}

// Validate reports the first setting that cannot work, naming it. Zero
// fields are valid (they take their defaults).
func (o Options) Validate() error {
	o = o.withDefaults()
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"DialTimeout", o.DialTimeout}, {"RequestTimeout", o.RequestTimeout}, {"WriteTimeout", o.WriteTimeout},
		{"RedialBackoffMin", o.RedialBackoffMin}, {"RedialBackoffMax", o.RedialBackoffMax},
		{"IdleTimeout", o.IdleTimeout}, {"BreakerOpenTimeout", o.BreakerOpenTimeout}, {"Spin", o.Spin},
	} {
		if d.v < 0 {
			return fmt.Errorf("%w: %s %v is negative", ErrInvalidOptions, d.name, d.v)
		}
	}
	if o.RedialBackoffMax < o.RedialBackoffMin {
		return fmt.Errorf("%w: RedialBackoffMax %v is below RedialBackoffMin %v",
			ErrInvalidOptions, o.RedialBackoffMax, o.RedialBackoffMin)
	}
	if o.MaxFrameSize < 0 {
		return fmt.Errorf("%w: MaxFrameSize %d is negative", ErrInvalidOptions, o.MaxFrameSize)
	}
	if c := o.Credentials; c != nil {
		if err := auth.ValidateName(c.Name); err != nil {
			return fmt.Errorf("%w: Credentials: %w", ErrInvalidOptions, err)
		}
		if c.Secret == "" || len(c.Secret) > protocol.MaxAuthSecret {
			// Never the secret itself in a message.
			return fmt.Errorf("%w: Credentials of %q: the secret must be 1 to %d bytes, not %d",
				ErrInvalidOptions, c.Name, protocol.MaxAuthSecret, len(c.Secret))
		}
	}
	return nil
}

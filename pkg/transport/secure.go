package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// What a new connection does before it takes requests: the TLS handshake
// (Options.TLS) and the authentication (Options.Credentials), both within
// the dial's time (DialTimeout). A failure of either is a "refusal": the
// server was reached and turned the connection down, or could not be
// trusted. Dialling again at once would only repeat it, so the back-off
// jumps to RedialBackoffMax (doc.go, "Security").

// authRequestID is the request id of the CmdAuth request a connection sends
// before any other (whose ids start at 1).
const authRequestID = 0

// tlsFor returns the TLS config for connections to addr: Options.TLS with
// ServerName set to addr's host when it has none. A config that verifies
// the server itself (InsecureSkipVerify with VerifyConnection, as
// pkg/tlsconfig's does to follow a CA file) sees that name as the
// connection state's ServerName even for an IP address, where Go leaves
// it empty.
func tlsFor(base *tls.Config, addr string) *tls.Config {
	cfg := base.Clone()
	if cfg.ServerName != "" {
		return cfg
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	cfg.ServerName = host
	if verify := cfg.VerifyConnection; verify != nil {
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if cs.ServerName == "" {
				cs.ServerName = host
			}
			return verify(cs)
		}
	}
	return cfg
}

// refusedError marks a failure after the TCP connection was made: the TLS
// handshake or the authentication failed.
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// isRefused reports whether err is a refusal (a failed handshake or
// authentication) rather than an address that could not be reached.
func isRefused(err error) bool {
	var re *refusedError
	return errors.As(err, &re)
}

// secure runs the TLS handshake and the authentication on raw and returns
// the connection requests go through (raw itself without TLS). Its errors
// are refusals.
func (p *peer) secure(ctx context.Context, raw net.Conn) (net.Conn, error) {
	nc := raw
	if p.tls != nil {
		tc := tls.Client(raw, p.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, &refusedError{fmt.Errorf("tls handshake: %w", err)}
		}
		nc = tc
	}
	if p.client.opts.Credentials != nil {
		if err := p.authenticate(ctx, nc); err != nil {
			return nil, &refusedError{err}
		}
	}
	return nc, nil
}

// authenticate sends CmdAuth with the client's credentials and waits for
// the answer, bounded by ctx. Nothing else is on the connection yet, so the
// exchange reads and writes nc directly.
func (p *peer) authenticate(ctx context.Context, nc net.Conn) (err error) {
	creds := p.client.opts.Credentials
	// The secret is in the frame: the frame is never logged, and errors
	// name only the identity.
	body, err := protocol.AppendAuthRequest(nil, &protocol.AuthRequest{Name: creds.Name, Secret: creds.Secret})
	if err != nil {
		return fmt.Errorf("authenticating as %q: %w", creds.Name, err)
	}
	if d, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(longAgo) })
	defer func() {
		if !stop() && err == nil {
			err = ctx.Err() // the deadline was moved into the past: the connection is no use
		}
		if err == nil {
			err = nc.SetDeadline(time.Time{})
		}
	}()
	if _, err := nc.Write(protocol.AppendRequest(nil, protocol.CmdAuth, authRequestID, body)); err != nil {
		return fmt.Errorf("authenticating as %q: write: %w", creds.Name, err)
	}
	var hdr [protocol.HeaderSize]byte
	if _, err := io.ReadFull(nc, hdr[:]); err != nil {
		return fmt.Errorf("authenticating as %q: read: %w", creds.Name, err)
	}
	h, err := protocol.ParseHeader(hdr[:], p.client.opts.MaxFrameSize)
	if err == nil && (!h.IsResponse() || h.RequestID != authRequestID) {
		err = fmt.Errorf("a frame that is not the answer (flags %#x, request id %d)", uint8(h.Flags), h.RequestID)
	}
	if err != nil {
		return fmt.Errorf("authenticating as %q: malformed answer%s: %w", creds.Name, tlsHint(hdr[:]), err)
	}
	resp := make([]byte, h.BodyLen)
	if _, err := io.ReadFull(nc, resp); err != nil {
		return fmt.Errorf("authenticating as %q: read: %w", creds.Name, err)
	}
	if st := h.Status(); st != protocol.StatusOK {
		return fmt.Errorf("authenticating as %q: %w", creds.Name, &protocol.Error{Status: st, Message: string(resp)})
	}
	who, err := protocol.DecodeAuthResponse(resp)
	if err != nil {
		return fmt.Errorf("authenticating as %q: %w", creds.Name, err)
	}
	p.client.lg.Debug("authenticated", zap.String("addr", p.addr), zap.String("identity", who.Name),
		zap.Uint8("kind", who.Kind), zap.String("identity_group", who.Group))
	return nil
}

// tlsHint explains a malformed frame that is a TLS record: the server
// speaks TLS and the client does not.
func tlsHint(b []byte) string {
	if len(b) >= 3 && b[0] >= 0x14 && b[0] <= 0x17 && b[1] == 3 {
		return " (the server speaks TLS: set the client's TLS config)"
	}
	return ""
}

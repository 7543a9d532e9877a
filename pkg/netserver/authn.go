package netserver

import (
	"bytes"
	"crypto/tls"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// maxAuthFailures is how many failed CmdAuth requests close a connection.
const maxAuthFailures = 3

// msgUnauthenticated answers requests that come before authentication.
var msgUnauthenticated = []byte("netserver: authenticate first (CmdAuth, or a TLS client certificate)")

// authenticated reports whether the connection may send requests other
// than CmdPing and CmdAuth, on its loop, once per read: always without
// RequireAuth; with it, when the connection has an identity. A connection
// that has an identity (with or without RequireAuth) has it refreshed
// first when Auth's policy version moved since the last look (an identity
// removed or disabled is dropped).
func (c *Conn) authenticated() bool {
	s := c.srv
	p := c.principal.Load()
	if p == nil {
		return !s.opts.RequireAuth
	}
	if v := s.opts.Auth.Version(); v != c.authVersion.Load() {
		c.authVersion.Store(v)
		return c.refresh(p) || !s.opts.RequireAuth
	}
	return true
}

// refresh replaces p, the connection's principal, with what it is under
// Auth's current policy, or drops it when its identity is gone. A CmdAuth
// that set another principal meanwhile wins.
func (c *Conn) refresh(p *auth.Principal) bool {
	s := c.srv
	fresh, err := s.opts.Auth.Refresh(p)
	if err != nil {
		if c.principal.CompareAndSwap(p, nil) {
			s.identities.release(c)
			c.logRefusal(0, protocol.StatusUnauthenticated, "identity removed or disabled",
				zap.Stringer("was", p), zap.Error(err))
		}
		return c.principal.Load() != nil
	}
	if fresh != p {
		c.principal.CompareAndSwap(p, fresh)
	}
	return true
}

// refuseUnauthenticated answers a request that came before authentication,
// on the loop.
func (c *Conn) refuseUnauthenticated(h protocol.Header) {
	c.srv.refusedUnauthenticated.Add(1)
	c.logRefusal(h.Command(), protocol.StatusUnauthenticated, "not authenticated")
	if !h.IsOneWay() {
		c.loopOut = protocol.AppendResponse(c.loopOut, protocol.StatusUnauthenticated, h.RequestID, msgUnauthenticated)
	}
}

// serveAuth serves CmdAuth, on the loop. Without Auth the answer is the
// open identity, at once. With it the credential is checked on a
// goroutine of its own (a secret's hash is slow), one CmdAuth of a
// connection at a time; the request counts as in flight meanwhile. A
// one-way CmdAuth is ignored: nobody would learn its outcome.
func (c *Conn) serveAuth(h protocol.Header, body []byte) {
	s := c.srv
	switch {
	case h.IsOneWay():
		return
	case s.opts.Auth == nil:
		c.loopOut = protocol.AppendResponse(c.loopOut, protocol.StatusOK, h.RequestID, authResponse(auth.Open))
		return
	case !c.authBusy.CompareAndSwap(false, true):
		c.loopOut = protocol.AppendResponse(c.loopOut, protocol.StatusBusy, h.RequestID,
			[]byte("netserver: another CmdAuth of this connection is being checked"))
		return
	}
	c.held.Add(1)
	s.busy.Add(1)
	s.authing.Add(1)
	go c.authenticate(h.RequestID, bytes.Clone(body))
}

// authenticate checks a CmdAuth credential and answers it. A success makes
// the identity the connection's principal, with or without RequireAuth: a
// client that names itself is held to its identity's grants (a server
// that does not require authentication still knows who a broker or an
// admin is, and serves what only they may have). A failure leaves the
// principal as it was, and the third closes the connection once its
// answer is written.
func (c *Conn) authenticate(requestID uint64, body []byte) {
	s := c.srv
	defer s.authing.Done()
	select {
	case <-c.done:
		c.authBusy.Store(false)
		return // closed meanwhile; closing released the request
	default:
	}
	q, err := protocol.DecodeAuthRequest(body)
	var p *auth.Principal
	if err == nil {
		p, err = s.opts.Auth.Authenticate(q.Name, q.Secret)
	}
	if err != nil {
		status := protocol.StatusUnauthenticated
		msg := "netserver: authentication failed"
		if q.Name == "" {
			status, msg = protocol.StatusBadRequest, "netserver: bad auth request: "+err.Error()
		}
		s.refusedUnauthenticated.Add(1)
		c.logRefusal(protocol.CmdAuth, protocol.StatusUnauthenticated, "authentication failed",
			zap.String("name", q.Name), zap.Error(err))
		strikes := c.authFailures.Add(1)
		c.authBusy.Store(false) // before the answer: the client may send the next at once
		c.reply(requestID, status, [][]byte{[]byte(msg)}, nil)
		if strikes >= maxAuthFailures {
			c.closeAfterReplies("failed CmdAuth 3 times")
		}
		return
	}
	if !s.identities.take(c, p, s.opts.MaxConnsPerIdentity) {
		c.authBusy.Store(false)
		c.reply(requestID, protocol.StatusBusy, [][]byte{[]byte("netserver: identity " + p.String() +
			" has too many connections (MaxConnsPerIdentity)")}, nil)
		c.closeAfterReplies("over MaxConnsPerIdentity")
		return
	}
	c.authBusy.Store(false)
	c.reply(requestID, protocol.StatusOK, [][]byte{authResponse(p)}, nil)
}

// authResponse is the body of a successful CmdAuth's answer.
func authResponse(p *auth.Principal) []byte {
	return protocol.AppendAuthResponse(nil, &protocol.AuthResponse{Name: p.Name, Kind: uint8(p.Kind), Group: p.Group})
}

// certificateIdentity takes the identity a verified TLS client certificate
// names as the connection's principal (when the server has Auth). A
// certificate that names no identity leaves
// the connection unauthenticated (it may still send CmdAuth). It reports
// false when the identity has MaxConnsPerIdentity connections already:
// the connection must be closed (the reason is logged).
func (c *Conn) certificateIdentity(cs tls.ConnectionState) bool {
	s := c.srv
	if s.opts.Auth == nil || len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return true
	}
	p, err := s.opts.Auth.Certificate(cs.PeerCertificates[0])
	if err != nil {
		c.logRefusal(0, protocol.StatusUnauthenticated, "client certificate names no usable identity",
			zap.String("subject", cs.PeerCertificates[0].Subject.String()), zap.Error(err))
		return true
	}
	if !s.identities.take(c, p, s.opts.MaxConnsPerIdentity) {
		c.closeReason("over MaxConnsPerIdentity", zap.Stringer("identity", p), zap.Int("limit", s.opts.MaxConnsPerIdentity))
		return false
	}
	return true
}

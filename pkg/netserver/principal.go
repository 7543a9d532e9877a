package netserver

import (
	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// nobody is the principal of a connection that has not authenticated to a
// server that requires it: it may do nothing. (Its requests never reach a
// handler; a handler still holding an earlier request sees it after the
// connection's identity was removed or disabled.)
var nobody = &auth.Principal{Name: "unauthenticated"}

// Principal returns the identity the connection runs as: auth.Open while
// the server does not require authentication. Handlers check every
// request against it (Principal().CanPublish(subject), ...) and refuse
// with Request.Refuse.
func (c *Conn) Principal() *auth.Principal {
	if p := c.principal.Load(); p != nil {
		return p
	}
	if c.srv.opts.RequireAuth {
		return nobody
	}
	return auth.Open
}

// Refuse answers the request with status (protocol.StatusUnauthenticated
// or StatusForbidden) and a message naming what was refused, counts the
// refusal in the server's Stats and logs it (a few lines a second at
// most, with the identity, the client's address, the command and msg).
func (r *Request) Refuse(status protocol.Status, msg string) {
	r.CountRefusal(status)
	r.Conn.logRefusal(r.Command(), status, msg)
	r.Reply(status, []byte(msg))
}

// CountRefusal counts a refusal the handler answered itself (a message of
// a send refused with StatusForbidden inside an otherwise answered batch).
func (r *Request) CountRefusal(status protocol.Status) { r.Conn.srv.countRefusal(status) }

func (s *Server) countRefusal(status protocol.Status) {
	if status == protocol.StatusUnauthenticated {
		s.refusedUnauthenticated.Add(1)
	} else {
		s.refusedForbidden.Add(1)
	}
}

// logRefusal logs a refused request (cmd 0: the connection's identity
// itself), at most noisyLogRate lines a second per server.
func (c *Conn) logRefusal(cmd protocol.Command, status protocol.Status, reason string, fields ...zap.Field) {
	ok, dropped := c.srv.refusalLog.allow()
	if !ok {
		return
	}
	fields = append([]zap.Field{zap.Stringer("identity", c.Principal()), zap.String("remote", c.remote),
		zap.Uint64("conn", c.id), zap.Stringer("status", status), zap.String("reason", reason)}, fields...)
	if cmd != 0 {
		fields = append(fields, zap.Stringer("command", cmd))
	}
	if dropped > 0 {
		fields = append(fields, zap.Int("unloggedBefore", dropped))
	}
	c.srv.lg.Warn("refused request", fields...)
}

// NoteRefusal counts and logs (rate-limited) a refusal the handler answers
// as part of a larger answer, such as one message of a send batch refused
// with StatusForbidden; msg names what was refused.
func (r *Request) NoteRefusal(status protocol.Status, msg string) {
	r.CountRefusal(status)
	r.Conn.logRefusal(r.Command(), status, msg)
}

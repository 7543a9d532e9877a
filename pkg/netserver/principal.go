package netserver

import (
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// Principal returns the identity the connection runs as: auth.Open while
// the server does not require authentication. Handlers check every
// request against it (Principal().CanPublish(subject), ...) and refuse
// with Request.Refuse.
func (c *Conn) Principal() *auth.Principal {
	if p := c.principal.Load(); p != nil {
		return p
	}
	return auth.Open
}

// Refuse answers the request with status (protocol.StatusUnauthenticated
// or StatusForbidden) and a message naming what was refused, and counts
// the refusal in the server's Stats.
func (r *Request) Refuse(status protocol.Status, msg string) {
	r.Conn.srv.countRefusal(status)
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

package delay

import (
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// Who may do what on a delay server's TCP port (pkg/auth; the
// connection's identity is netserver's Conn.Principal, auth.Open on a
// server that does not require authentication):
//
//	send                      publish, per message: a refused message is
//	                          answered StatusForbidden in the batch, the
//	                          others are stored
//	switchover                admin write
//	delay-sync-* (copying)    a broker of this group (its slave)
//
// A refusal changes nothing and is counted and logged by netserver.

// allowed wraps a handler whose command needs what may grants.
func (s *Server) allowed(may func(*auth.Principal) bool, what string, h func(*netserver.Request)) func(*netserver.Request) {
	return func(r *netserver.Request) {
		if p := r.Conn.Principal(); !may(p) {
			if p.Kind == 0 { // netserver's principal of a connection that has none
				r.Refuse(protocol.StatusUnauthenticated, "authenticate first: "+what)
			} else {
				r.Refuse(protocol.StatusForbidden, "identity "+p.String()+" may not "+what)
			}
			return
		}
		h(r)
	}
}

// publishable returns the messages of a send the connection's identity
// may publish, and, when it refused some, the index in msgs of each one
// kept (nil: all kept). Messages that do not parse are kept: the store
// refuses them with their own status.
func publishable(r *netserver.Request, msgs [][]byte) ([][]byte, []int) {
	p := r.Conn.Principal()
	if p.IsOpen() || p.Kind == auth.KindBroker {
		return msgs, nil
	}
	check := auth.NewPublishCheck(p)
	var kept [][]byte
	var index []int
	for i, raw := range msgs {
		v, err := protocol.ParseMessage(raw)
		if err != nil || check.Allowed(v.Subject) {
			if index != nil {
				kept, index = append(kept, raw), append(index, i)
			}
			continue
		}
		r.NoteRefusal(protocol.StatusForbidden, "publish to "+string(v.Subject))
		if index == nil {
			kept, index = make([][]byte, 0, len(msgs)), make([]int, 0, len(msgs))
			for j := 0; j < i; j++ {
				kept, index = append(kept, msgs[j]), append(index, j)
			}
		}
	}
	if index == nil {
		return msgs, nil
	}
	return kept, index
}

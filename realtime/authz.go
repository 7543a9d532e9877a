package realtime

import (
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// Who may do what on a realtime broker's TCP port (pkg/auth; the
// connection's identity is netserver's Conn.Principal, auth.Open on a
// broker that does not require authentication):
//
//	send                  publish, per message: a refused message is answered
//	                      StatusForbidden in the batch, the others are stored
//	pull, ack             consume the subject as the group
//	consumer-manage       admin write
//	broker-stats          admin read
//	find-messages         admin read; bodies only with read bodies
//	dead-letters          list and inspect (message bodies): read bodies;
//	                      re-drive and purge: admin write
//	switchover            admin write
//	sync-log, sync-epoch  a broker of this group (a slave copying)
//
// A refusal answers StatusForbidden (StatusUnauthenticated for a
// connection without an identity), changes nothing, and is counted and
// logged by netserver.

// allowed wraps a handler whose command needs what may grants: others are
// refused before the body is read.
func (b *Broker) allowed(may func(*auth.Principal) bool, what string, h func(*netserver.Request)) func(*netserver.Request) {
	return func(r *netserver.Request) {
		if p := r.Conn.Principal(); !may(p) {
			refuse(r, p, what)
			return
		}
		h(r)
	}
}

// refuse answers a request p may not make.
func refuse(r *netserver.Request, p *auth.Principal, what string) {
	if p.Kind == 0 { // netserver's principal of a connection that has none
		r.Refuse(protocol.StatusUnauthenticated, "authenticate first: "+what)
		return
	}
	r.Refuse(protocol.StatusForbidden, "identity "+p.String()+" may not "+what)
}

// mayConsume refuses (and reports false) a pull or ack of subject as group
// by an identity that may not consume it.
func mayConsume(r *netserver.Request, subject, group string) bool {
	p := r.Conn.Principal()
	if p.CanConsume(subject, group) {
		return true
	}
	refuse(r, p, "consume "+subject+" as group "+group)
	return false
}

func adminRead(p *auth.Principal) bool  { return p.CanAdminRead() }
func adminWrite(p *auth.Principal) bool { return p.CanAdminWrite() }

// brokerOf returns the check that a connection is a broker of group.
func brokerOf(group string) func(*auth.Principal) bool {
	return func(p *auth.Principal) bool { return p.IsBrokerOf(group) }
}

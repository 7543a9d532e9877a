package metaserver

import (
	"context"
	"sync"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// TCP handlers. Lookups whose route is in the view are answered on the
// connection's serve goroutine (no etcd call, no allocation beyond the
// reply); anything that writes to etcd runs on a goroutine of its own and
// replies from there.

var replyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// Who may send what (authz.go): a lookup needs an authenticated identity
// (any) where the subject has a route, and the right to publish (a
// producer) or consume as the group (a consumer) the subject where the
// lookup would create its first route; a registration a broker of the group it registers, a consumer
// heartbeat an identity that may consume the subject as the group. Without
// Options.RequireAuth a connection that named no identity runs as
// auth.Open, which may do all of it.

func (s *Server) serveLookup(r *netserver.Request) {
	req, err := protocol.DecodeLookupRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	p := s.tcpPrincipal(r)
	if p == nil {
		s.refuseTCP(r, p, "look up routes")
		return
	}
	s.metrics.lookup(req.ClientType)
	kind := protocol.KindRealtime
	if req.ClientType == protocol.ClientDelayProducer {
		kind = protocol.KindDelay
	}
	if req.ClientType >= protocol.ClientProducer && req.ClientType <= protocol.ClientDelayProducer {
		subject := protocol.RealSubject(req.Subject)
		if resp, ok := s.routeResponse(kind, subject, req); ok {
			if req.Wait > 0 && protocol.RouteHash(&resp) == req.Known {
				go s.longPoll(r.Detach(), req, kind, subject) // longpoll.go
				return
			}
			s.replyLookup(r, &resp)
			return
		}
	}
	// No route yet: the lookup would give the subject its first one,
	// which only an identity that may use the subject may cause.
	if !mayCreateRoute(p, req) {
		s.refuseTCP(r, p, "create the first route of "+req.Subject+" (needs the right to "+lookupRight(req)+" it)")
		return
	}
	go func() {
		resp, err := s.lookup(context.Background(), req)
		if err != nil {
			s.metrics.lookupErrors.Inc()
			r.ReplyError(err)
			return
		}
		s.replyLookup(r, &resp)
	}()
}

func (s *Server) replyLookup(r *netserver.Request, resp *protocol.LookupResponse) {
	bp := replyBufs.Get().(*[]byte)
	*bp = protocol.AppendLookupResponse((*bp)[:0], resp)
	r.Reply(protocol.StatusOK, *bp)
	replyBufs.Put(bp)
}

// registerViewWait bounds how long a registration's answer waits for the
// view to show it (serveRegister).
const registerViewWait = time.Second

func (s *Server) serveRegister(r *netserver.Request) {
	req, err := protocol.DecodeRegisterRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if p := s.tcpPrincipal(r); p == nil || !p.IsBrokerOf(req.Group) {
		s.refuseTCP(r, p, "register as a broker of group "+req.Group)
		return
	}
	s.metrics.registers.Inc()
	go func() {
		resp, err := s.registerBroker(context.Background(), req)
		if err != nil {
			s.lg.Warn("broker registration failed", zap.String("group", req.Group), zap.String("broker", req.BrokerID), zap.Error(err))
			r.ReplyError(err)
			return
		}
		if req.Role == protocol.RoleMaster && req.Flags&protocol.RegisterLeaving == 0 && resp.Master == req.Address {
			s.watchMasterConn(req.Group, req.BrokerID, req.Address, r.Done())
		}
		// Read your writes: a registration this server wrote is in its view
		// before the answer goes, so a lookup right after it (the broker's
		// clients, a test) routes to the group. Bounded: the write stands
		// either way, only its visibility here waits for the watch.
		wctx, cancel := context.WithTimeout(context.Background(), registerViewWait)
		_ = s.view.waitRevision(wctx, int64(resp.Version))
		cancel()
		r.Reply(protocol.StatusOK, protocol.AppendRegisterResponse(nil, &resp))
	}()
}

func (s *Server) serveClientHeartbeat(r *netserver.Request) {
	req, err := protocol.DecodeClientHeartbeatRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if p := s.tcpPrincipal(r); p == nil || !p.CanConsume(req.Subject, req.Group) {
		s.refuseTCP(r, p, "consume "+req.Subject+" as group "+req.Group)
		return
	}
	s.metrics.heartbeats.Inc()
	go func() {
		resp, err := s.clientHeartbeat(context.Background(), req)
		if err != nil {
			r.ReplyError(err)
			return
		}
		r.Reply(protocol.StatusOK, protocol.AppendClientHeartbeatResponse(nil, &resp))
	}()
}

// mayCreateRoute reports whether p may cause req's subject its first
// route: a producer's identity may publish it, a consumer's may consume it
// as the request's group (system subjects follow their subject and group,
// pkg/auth).
func mayCreateRoute(p *auth.Principal, req protocol.LookupRequest) bool {
	if req.ClientType == protocol.ClientConsumer {
		return p.CanConsume(req.Subject, req.Group)
	}
	return p.CanPublish(req.Subject)
}

// lookupRight names the right mayCreateRoute checks.
func lookupRight(req protocol.LookupRequest) string {
	if req.ClientType == protocol.ClientConsumer {
		return "consume as group " + req.Group
	}
	return "publish"
}

package metaserver

import (
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// maxLookupWait caps how long a long-polling lookup is held.
const maxLookupWait = 30 * time.Second

// longPoll answers a lookup with Wait > 0 (protocol.LookupRequest) whose
// route exists: at once when the answer differs from the one the client
// holds (RouteHash != Known), else as soon as a change of the view makes
// it differ, or after Wait with the answer as it is. It runs on a
// goroutine of its own; clients hold one per route they watch
// (pkg/metaclient), so a failover reaches them within a round trip of the
// election.
func (s *Server) longPoll(r *netserver.Request, req protocol.LookupRequest, kind protocol.BrokerKind, subject string) {
	timer := time.NewTimer(min(req.Wait, maxLookupWait))
	defer timer.Stop()
	for {
		s.view.mu.RLock()
		changed := s.view.changed
		s.view.mu.RUnlock()
		resp, ok := s.routeResponse(kind, subject, req)
		if !ok || protocol.RouteHash(&resp) != req.Known {
			s.answerPoll(r, req, kind, subject, resp, ok)
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			s.replyLookup(r, &resp)
			return
		case <-r.Done():
			return
		case <-s.closing.Done():
			s.replyLookup(r, &resp)
			return
		}
	}
}

// answerPoll answers a long poll whose route changed, or went away (then
// as a plain lookup would: it assigns the route again).
func (s *Server) answerPoll(r *netserver.Request, req protocol.LookupRequest, kind protocol.BrokerKind, subject string, resp protocol.LookupResponse, ok bool) {
	if ok {
		s.replyLookup(r, &resp)
		return
	}
	resp, err := s.lookup(s.closing, req)
	if err != nil {
		s.metrics.lookupErrors.Inc()
		r.ReplyError(err)
		return
	}
	s.replyLookup(r, &resp)
}

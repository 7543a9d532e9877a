package metaserver

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// Policy distribution: brokers keep the newest policy (every identity, its
// grants and its hashed secret) to authenticate their own clients, asking
// any meta server with CmdPolicy (pkg/protocol/policy.go) in a long poll:
// a request naming the version the broker has is answered at once when the
// view's policy is newer, and otherwise held until it is (or the wait
// ends). Only an authenticated broker or admin identity may ask, whether or
// not the server requires authentication, since the policy holds secret
// hashes.

// MaxPolicyWait caps how long a CmdPolicy request is held.
const MaxPolicyWait = time.Minute

func (s *Server) servePolicy(r *netserver.Request) {
	req, err := protocol.DecodePolicyRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if p := s.tcpPrincipal(r); !mayFetchPolicy(p) {
		s.refuseTCP(r, p, "fetch the policy (brokers and admins only)")
		return
	}
	go s.answerPolicy(r, req)
}

// mayFetchPolicy reports whether p may have the policy: an authenticated
// broker or admin (never auth.Open: the policy holds secret hashes).
func mayFetchPolicy(p *auth.Principal) bool {
	return p != nil && !p.IsOpen() && (p.Kind == auth.KindBroker || p.CanAdminRead())
}

// answerPolicy answers a policy request once the view's policy is newer
// than the request's version, or when its wait ends, the connection closes
// or the server closes.
func (s *Server) answerPolicy(r *netserver.Request, req protocol.PolicyRequest) {
	timer := time.NewTimer(min(req.Wait, MaxPolicyWait))
	defer timer.Stop()
	for {
		version, encoded, changed := s.view.ids.published()
		if version > req.Version {
			if p := s.tcpPrincipal(r); !mayFetchPolicy(p) {
				s.refuseTCP(r, p, "fetch the policy (brokers and admins only)") // removed or disabled meanwhile
				return
			}
			s.replyPolicy(r, version, encoded)
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			s.replyPolicy(r, version, nil)
			return
		case <-s.closing.Done():
			s.replyPolicy(r, version, nil)
			return
		case <-r.Done():
			return
		}
	}
}

func (s *Server) replyPolicy(r *netserver.Request, version uint64, encoded []byte) {
	body, err := protocol.AppendPolicyResponse(nil, &protocol.PolicyResponse{Version: version, Policy: encoded})
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusInternal, err.Error()))
		return
	}
	if len(encoded) > 0 {
		s.policiesSent.Inc()
	}
	r.Reply(protocol.StatusOK, body)
}

// policyMetrics registers the policy's version and the policies sent.
func (s *Server) policyMetrics(reg prometheus.Registerer) {
	s.policiesSent = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "qmq_meta_policies_sent_total", Help: "Policies sent to brokers (CmdPolicy answers carrying a policy).",
	})
	version := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "qmq_meta_policy_version", Help: "Version (etcd revision) of the policy this server serves.",
	}, func() float64 { return float64(s.authority().Version()) })
	identities := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "qmq_meta_identities", Help: "Identities in the policy this server serves.",
	}, func() float64 {
		if p := s.authority().Policy(); p != nil {
			return float64(p.Len())
		}
		return 0
	})
	reg.MustRegister(s.policiesSent, version, identities)
}

package metaserver

import (
	"context"
	"crypto/x509"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// Who may do what on the meta server's ports. Identities and their
// grants come from the policy the view publishes (identities.go); both
// ports check requests against the server's Authority, so they keep
// working on the last policy while etcd is away.
//
// HTTP: a request names its identity with "Authorization: Bearer
// <name>:<secret>", "Authorization: Bearer <secret>" (identity admin: the
// admin token), or basic auth (curl -u name:secret). A credential that
// does not authenticate is refused (401) whatever the endpoint; a missing
// one only where the endpoint needs an identity (401); an identity without
// the right is refused with 403. Refusals change nothing: they are
// answered before the endpoint runs.
//
// TCP: a connection proves its identity with CmdAuth (pkg/netserver does
// it once it serves authentication; until then the meta server serves
// CmdAuth itself and remembers the principal per connection).

// access is what an endpoint needs.
type access uint8

const (
	// accessOpen: anyone (who am I).
	accessOpen access = iota
	// accessRead: cluster state; admin read when the server requires
	// authentication, anyone otherwise.
	accessRead
	// accessAdminRead: identities; admin read always.
	accessAdminRead
	// accessBodies: message bodies; read bodies always.
	accessBodies
	// accessWrite: changes; admin write always.
	accessWrite
)

// String names the right an access needs, for refusals.
func (a access) String() string {
	switch a {
	case accessRead, accessAdminRead:
		return "admin read"
	case accessBodies:
		return "read bodies"
	case accessWrite:
		return "admin write"
	}
	return "nothing"
}

// allows reports whether p (nil: no credential) may use an endpoint
// needing a.
func (s *Server) allows(p *auth.Principal, a access) bool {
	switch a {
	case accessOpen:
		return true
	case accessRead:
		return !s.opts.RequireAuth || p != nil && p.CanAdminRead()
	case accessAdminRead:
		return p != nil && p.CanAdminRead()
	case accessBodies:
		return p != nil && p.CanReadBodies()
	}
	return p != nil && p.CanAdminWrite()
}

// errBadCredential: the request's credential does not authenticate.
var errBadCredential = errors.New("the credential does not authenticate (unknown identity, wrong secret, or a disabled identity)")

// httpPrincipal authenticates a request's credential: nil without one.
func (s *Server) httpPrincipal(r *http.Request) (*auth.Principal, error) {
	var verified [][]*x509.Certificate
	if r.TLS != nil {
		verified = r.TLS.VerifiedChains
	}
	p, err := auth.HTTPPrincipal(s.authority(), r.Header.Get("Authorization"), verified)
	if err != nil {
		return nil, errBadCredential
	}
	return p, nil
}

type principalKey struct{}

// principalOf returns the identity a guarded request authenticated as
// (nil: none).
func principalOf(ctx context.Context) *auth.Principal {
	p, _ := ctx.Value(principalKey{}).(*auth.Principal)
	return p
}

// identityName describes p for refusals and logs.
func identityName(p *auth.Principal) string {
	if p == nil {
		return "anonymous"
	}
	return p.String()
}

// guard authenticates a request and lets it through to h only when its
// identity has what need asks; otherwise it answers 401 or 403 (JSON
// naming what was refused and what it needs), counts the refusal and logs
// it (rate-limited). h finds the identity with principalOf.
func (s *Server) guard(need access, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		what := r.Method + " " + r.URL.Path
		p, err := s.httpPrincipal(r)
		if err != nil {
			s.refusals.add("http", reasonBadCredential, "", r.RemoteAddr, what)
			s.refuseHTTP(w, http.StatusUnauthorized, api.Error{Error: "unauthenticated: " + err.Error(), Refused: what, Needs: need.String()})
			return
		}
		if !s.allows(p, need) {
			if p == nil {
				s.refusals.add("http", reasonNoCredential, "", r.RemoteAddr, what)
				s.refuseHTTP(w, http.StatusUnauthorized, api.Error{
					Error:   "unauthenticated: " + what + " needs an identity with " + need.String() + " (Authorization: Bearer <name>:<secret>, or basic auth)",
					Refused: what, Needs: need.String(),
				})
				return
			}
			s.refusals.add("http", reasonForbidden, p.String(), r.RemoteAddr, what)
			s.refuseHTTP(w, http.StatusForbidden, api.Error{
				Error:   "forbidden: identity " + p.String() + " may not " + what + " (needs " + need.String() + ")",
				Refused: what, Needs: need.String(), Identity: p.String(),
			})
			return
		}
		if p != nil {
			r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
		}
		h(w, r)
	}
}

func (s *Server) refuseHTTP(w http.ResponseWriter, status int, body api.Error) {
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="qmq"`)
	}
	if strings.HasPrefix(body.Refused, "POST ") || strings.HasPrefix(body.Refused, "PUT ") || strings.HasPrefix(body.Refused, "DELETE ") {
		s.metrics.adminChanges.WithLabelValues("refused").Inc()
	}
	writeJSON(w, status, body)
}

// whoami answers who the request's credential is and what it may do.
func (s *Server) whoami(r *http.Request) (any, error) {
	p := principalOf(r.Context())
	out := api.Whoami{AuthRequired: s.opts.RequireAuth, Admin: auth.AdminNone.String()}
	if p != nil {
		out.Authenticated, out.Name, out.Kind, out.Group = true, p.Name, p.Kind.String(), p.Group
		switch {
		case p.CanAdminWrite():
			out.Admin = auth.AdminWrite.String()
		case p.CanAdminRead():
			out.Admin = auth.AdminRead.String()
		}
	}
	out.CanRead = s.allows(p, accessRead)
	out.CanReadIdentities = s.allows(p, accessAdminRead)
	out.CanReadBodies = s.allows(p, accessBodies)
	out.CanWrite = s.allows(p, accessWrite)
	return out, nil
}

// authority is the server's view of the policy.
func (s *Server) authority() *auth.Authority { return s.view.ids.authority }

// --- refusals ---

// Refusal reasons, the label of qmq_meta_refusals_total.
const (
	reasonNoCredential  = "no_credential"  // the request needs an identity and names none
	reasonBadCredential = "bad_credential" // the credential does not authenticate
	reasonForbidden     = "forbidden"      // the identity lacks the right
)

// refusalLogWindow and refusalLogMax: at most refusalLogMax refusals are
// logged per window; the rest are counted and the count logged when the
// next window starts, so a flood of refused requests cannot flood the log.
const (
	refusalLogWindow = time.Minute
	refusalLogMax    = 20
)

// refusals counts refused requests by port and reason, and logs them at a
// rate limit.
type refusals struct {
	count *prometheus.CounterVec
	lg    *zap.Logger

	mu         sync.Mutex
	window     time.Time
	logged     int
	suppressed int
}

func newRefusals(reg prometheus.Registerer, lg *zap.Logger) *refusals {
	rf := &refusals{lg: lg, count: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "qmq_meta_refusals_total",
		Help: "Requests refused for want of an identity or a right, by port (http, tcp) and reason (no_credential, bad_credential, forbidden).",
	}, []string{"port", "reason"})}
	reg.MustRegister(rf.count)
	for _, port := range []string{"http", "tcp"} {
		for _, reason := range []string{reasonNoCredential, reasonBadCredential, reasonForbidden} {
			rf.count.WithLabelValues(port, reason)
		}
	}
	return rf
}

// add counts a refusal and logs it unless this window's share is spent.
// identity is empty when the request had none; no secret ever reaches it.
func (rf *refusals) add(port, reason, identity, remote, what string) {
	rf.count.WithLabelValues(port, reason).Inc()
	now := time.Now()
	rf.mu.Lock()
	if now.Sub(rf.window) >= refusalLogWindow {
		if rf.suppressed > 0 {
			rf.lg.Warn("refusals not logged in the last window", zap.Int("count", rf.suppressed), zap.Duration("window", refusalLogWindow))
		}
		rf.window, rf.logged, rf.suppressed = now, 0, 0
	}
	log := rf.logged < refusalLogMax
	if log {
		rf.logged++
	} else {
		rf.suppressed++
	}
	rf.mu.Unlock()
	if log {
		rf.lg.Warn("request refused", zap.String("port", port), zap.String("reason", reason), zap.String("identity", identity),
			zap.String("remote", remote), zap.String("request", what))
	}
}

// --- TCP ---

// tcpPrincipal returns the identity a request runs as: the connection's
// (pkg/netserver authenticates it by TLS client certificate or CmdAuth),
// brought up to the current policy for a request answered long after it
// came (a policy long poll); nil when the identity was removed or disabled
// since. auth.Open is a connection that named no identity on a meta server
// without --auth.
func (s *Server) tcpPrincipal(r *netserver.Request) *auth.Principal {
	p := r.Conn.Principal()
	if p.IsOpen() {
		if s.opts.RequireAuth {
			return nil
		}
		return p
	}
	if p.Version != s.authority().Version() {
		np, err := s.authority().Refresh(p)
		if err != nil {
			return nil
		}
		p = np
	}
	return p
}

// refuseTCP answers a request its identity may not make (p nil:
// unauthenticated) and counts and logs the refusal.
func (s *Server) refuseTCP(r *netserver.Request, p *auth.Principal, what string) {
	if p == nil || p.IsOpen() {
		s.refusals.add("tcp", reasonNoCredential, "", r.Conn.RemoteAddr(), what)
		r.Refuse(protocol.StatusUnauthenticated, what+": authenticate first (CmdAuth)")
		return
	}
	s.refusals.add("tcp", reasonForbidden, p.String(), r.Conn.RemoteAddr(), what)
	r.Refuse(protocol.StatusForbidden, "identity "+p.String()+" may not "+what)
}

package delay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/qmq-go/qmq/delay/store"
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/clock"
	"github.com/qmq-go/qmq/pkg/failover"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/opsserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/secure"
	"go.uber.org/zap"
)

// Server is a delay server: the master or the slave of one delay group. A
// master stores delayed messages in a delay/store and forwards each to a
// realtime broker group of its subject when it falls due; a slave copies
// its master's hour files and takes over when the master is gone.
type Server struct {
	opts   Options
	lg     *zap.Logger
	clk    clock.Clock
	server *netserver.Server
	ops    *opsserver.Server
	// kit is the server's TLS, credentials and connection bounds;
	// policies (nil without meta servers) the identities it checks
	// connections against (pkg/secure).
	kit      *secure.Kit
	policies *metaclient.PolicyCache
	resolver route.Resolver
	limits   protocol.Limits
	metrics  *metrics
	reg      *prometheus.Registry

	meta *metaclient.Client // route lookups, when forwarding through the meta servers

	// Failover: member runs the group's role loop (with meta servers);
	// gate is its write gate (always open for a master without meta
	// servers, closed for a slave). roleMu serializes role changes;
	// copyStopped (under it) keeps a campaigning slave from copying.
	member      atomic.Pointer[failover.Member]
	gate        *failover.Gate
	roleMu      sync.Mutex
	copyStopped bool
	copyWatch   failover.CopyWatch
	stop        chan struct{} // closed by Close

	// The current role: exactly one of master and slave is set, except
	// while the server changes role (then sends get StatusNotMaster).
	mu     sync.Mutex
	master *master
	slave  *slave

	life      opsserver.Readiness // starting, ready, shutting down (/readyz)
	closeOnce sync.Once
	closeErr  error
}

// New opens the server's store (recovering it) — a master's store, or a
// slave's copy — and prepares its servers. clk nil means the real clock;
// resolver nil builds one from Options (Realtime addresses; the meta server
// once registered).
func New(opts Options, clk clock.Clock, resolver route.Resolver, lg *zap.Logger) (*Server, error) {
	if resolver != nil && len(opts.MetaServers) == 0 && len(opts.Realtime) == 0 {
		opts.Realtime = []string{"(resolver)"} // satisfied by the given resolver
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if lg == nil {
		lg = zap.NewNop()
	}
	if clk == nil {
		clk = clock.Real()
	}
	lg = lg.Named("delay").With(zap.String("group", opts.Group))
	s := &Server{opts: opts, lg: lg, clk: clk, reg: opsserver.NewRegistry(), stop: make(chan struct{})}
	s.limits = protocol.DefaultLimits
	s.limits.MaxBody = opts.MaxBody
	kit, err := opts.Secure.Build(lg)
	if err != nil {
		return nil, fmt.Errorf("delay: %w", err)
	}
	s.kit = kit
	if resolver == nil {
		if len(opts.Realtime) > 0 {
			resolver = route.NewStatic(route.Groups(opts.Realtime...), nil)
		} else {
			mc, err := metaclient.New(opts.MetaServers, "delay-"+opts.Group, append(kit.Meta(), metaclient.WithLogger(lg))...)
			if err != nil {
				return nil, fmt.Errorf("delay: %w", err)
			}
			s.meta, resolver = mc, mc
		}
	}
	s.resolver = resolver
	s.metrics = newMetrics(s.reg, opts.Group, s)

	if opts.Role == RoleSlave {
		s.slave, err = openSlave(s)
	} else {
		s.master, err = openMaster(s)
	}
	if err != nil {
		s.closeMeta()
		return nil, err
	}
	// The write gate: closed for a slave, and for a master until its role
	// loop registers it; open for good without meta servers (nobody else
	// can be elected).
	s.gate = failover.NewGate(opts.Group)
	if s.master != nil && len(opts.MetaServers) == 0 {
		s.gate = failover.OpenGate(opts.Group)
	}
	mux := netserver.NewMux()
	mux.HandleFunc(protocol.CmdSend, s.serveSend)
	mux.HandleFunc(protocol.CmdScheduleCancel, s.serveCancel)
	mux.HandleFunc(protocol.CmdScheduleReschedule, s.serveReschedule)
	copying := "copy group " + opts.Group + "'s files (a broker of the group)"
	brokerOf := func(p *auth.Principal) bool { return p.IsBrokerOf(opts.Group) }
	mux.HandleFunc(protocol.CmdDelaySyncManifest, s.allowed(brokerOf, copying, s.serveManifest))
	mux.HandleFunc(protocol.CmdDelaySyncRead, s.allowed(brokerOf, copying, s.serveRead))
	mux.HandleFunc(protocol.CmdDelaySyncOrigin, s.allowed(brokerOf, copying, s.serveOrigin))
	mux.HandleFunc(protocol.CmdFindMessages, s.allowed(func(p *auth.Principal) bool { return p.CanAdminRead() },
		"look scheduled messages up (admin read)", s.serveFindMessages))
	mux.HandleFunc(protocol.CmdSwitchover, s.allowed(func(p *auth.Principal) bool { return p.CanAdminWrite() },
		"hand the group over (admin write)", s.serveSwitchover))
	authority := auth.NewAuthority(nil) // certificate identities only, without meta servers
	if len(opts.MetaServers) > 0 {
		if s.policies, err = kit.Policies(opts.MetaServers, filepath.Join(opts.DataDir, policyFile), lg.Named("policy")); err != nil {
			s.closeRole(context.Background())
			s.closeMeta()
			return nil, err
		}
		if s.policies != nil {
			authority = s.policies.Authority()
		}
	}
	nopts := netserver.Options{Addr: opts.Addr, MaxFrameSize: opts.MaxFrameSize}
	kit.Listener(&nopts, authority)
	srv, err := netserver.New(nopts, mux, lg)
	if err != nil {
		s.closeRole(context.Background())
		s.closeMeta()
		return nil, err
	}
	s.server = srv
	s.reg.MustRegister(netserver.LimitsCollector("qmq_delay", func() *netserver.Server { return s.server }))
	if opts.HTTPAddr != "" {
		s.ops = opsserver.New(opsserver.Options{Addr: opts.HTTPAddr, Registry: s.reg, Ready: s.life.Err,
			TLS: kit.ServerTLS, Authorize: kit.Authorize(authority), Insecure: kit.Insecure()}, lg)
		s.mountSchedule(kit.Authorize(authority))
	}
	return s, nil
}

// policyFile is the server's copy of the meta servers' policy, in its data
// directory (pkg/metaclient PolicyCache).
const policyFile = "policy"

// Start serves producers (a master) or starts copying (a slave), and
// registers with the meta servers.
func (s *Server) Start() error {
	if s.policies != nil {
		s.policies.Start()
	}
	if err := s.server.Start(); err != nil {
		return fmt.Errorf("delay: %w", err)
	}
	if s.ops != nil {
		if err := s.ops.Start(); err != nil {
			s.server.Close(context.Background())
			return fmt.Errorf("delay: %w", err)
		}
	}
	m, _ := s.current()
	switch {
	case len(s.opts.MetaServers) > 0:
		fo := failover.NewOptions()
		fo.Kind, fo.Group, fo.BrokerID, fo.Address, fo.MetaServers = protocol.KindDelay, s.opts.Group, s.opts.BrokerID, s.advertised(), s.opts.MetaServers
		fo.Fixed = !s.opts.Failover || s.opts.Master != ""
		fo.WaitSlave, fo.SlaveLagLimit, fo.SlaveDown, fo.SuspectAfter = s.opts.WaitSlave, s.opts.SlaveLagReadonly, s.opts.SlaveDown, s.opts.SuspectAfter
		fo.Registry, fo.Gate = s.reg, s.gate
		fo.MetaOptions = s.kit.Meta()
		if m == nil {
			fo.Role = protocol.RoleSlave
		}
		mem, err := failover.New(fo, s, s.lg)
		if err != nil {
			s.server.Close(context.Background())
			return fmt.Errorf("delay: %w", err)
		}
		s.member.Store(mem) // before the role starts: a slave asks it for its master
	}
	s.mu.Lock()
	if s.master != nil {
		s.master.start()
	} else {
		s.slave.start()
	}
	s.mu.Unlock()
	if s.member.Load() != nil {
		s.member.Load().Start()
	}
	s.life.SetReady()
	s.lg.Info("serving", zap.Stringer("addr", s.server.Addr()), zap.String("role", s.opts.Role), zap.String("flush", s.opts.Flush))
	return nil
}

// Addr returns the producer address.
func (s *Server) Addr() net.Addr { return s.server.Addr() }

// HTTPAddr returns the operations HTTP address, or nil when disabled.
func (s *Server) HTTPAddr() net.Addr {
	if s.ops == nil {
		return nil
	}
	return s.ops.Addr()
}

// advertised returns the address registered with the meta servers.
func (s *Server) advertised() string {
	if s.opts.AdvertiseAddr != "" {
		return s.opts.AdvertiseAddr
	}
	return s.server.Addr().String()
}

// current returns the current role's master or slave (one is nil).
func (s *Server) current() (*master, *slave) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.master, s.slave
}

// Role returns RoleMaster or RoleSlave ("" while changing role).
func (s *Server) Role() string {
	switch m, sl := s.current(); {
	case m != nil:
		return RoleMaster
	case sl != nil:
		return RoleSlave
	}
	return ""
}

// Stats returns the store's statistics; on a slave, only Pending (the
// copy's messages not marked dispatched).
func (s *Server) Stats() store.Stats {
	m, sl := s.current()
	switch {
	case m != nil:
		return m.store.Stats()
	case sl != nil:
		return store.Stats{Pending: sl.replica.Pending()}
	}
	return store.Stats{}
}

// Replication describes the server's part in its group's replication.
type Replication struct {
	Role  string
	Epoch uint64 // a master's own epoch; a slave's master's (0: none)
	// Fenced: a master whose write gate is closed for another reason than
	// a readonly group (not registered yet, deposed, handing over, or in
	// async mode neither of its leases holds) takes no sends and forwards
	// nothing.
	Fenced bool
	// WriteState and WriteReason: the master's write state (pkg/failover).
	WriteState  protocol.WriteState
	WriteReason string
	// LeaseUntil: on a master, the earliest its registration's lease can
	// expire (its last renewal plus the TTL; zero before it registered).
	LeaseUntil time.Time
	// LagBytes and Lag: on a master, how far its slave is behind (bytes of
	// the message log replayed that the slave's copy lacks; age of the
	// oldest); on a slave, how far its copy is behind its master.
	LagBytes int64
	Lag      time.Duration
	// Readonly: a master whose slave lags past SlaveLagReadonly (WaitSlave).
	Readonly bool
	// WaitingAcks counts send replies waiting for the slave.
	WaitingAcks int
}

// Replication returns the server's replication status.
func (s *Server) Replication() Replication {
	m, sl := s.current()
	switch {
	case m != nil:
		b, d := m.src.lag()
		gs := s.gate.State()
		r := Replication{Role: RoleMaster, Epoch: m.epoch.Load(), Fenced: !s.gate.Open() && gs != protocol.WriteReadonly, LagBytes: b, Lag: d,
			Readonly: m.src.readonly.Load() || gs == protocol.WriteReadonly, WaitingAcks: m.src.waiting()}
		if s.member.Load() != nil {
			r.WriteState, r.WriteReason = s.member.Load().WriteState()
			if at, ttl := s.member.Load().Lease(); !at.IsZero() {
				r.LeaseUntil = at.Add(ttl)
			}
		}
		return r
	case sl != nil:
		b, d := sl.lag()
		return Replication{Role: RoleSlave, Epoch: s.masterEpoch(), LagBytes: b, Lag: d}
	}
	return Replication{}
}

// serveSend stores delayed messages on a master; each gets its own status
// once it is durable (and, with WaitSlave, on the slave) or why it was
// refused.
func (s *Server) serveSend(r *netserver.Request) {
	if s.life.Closing() {
		r.ReplyError(protocol.Errorf(protocol.StatusShuttingDown, "delay group "+s.opts.Group+" is shutting down"))
		return
	}
	m, _ := s.current()
	if m == nil {
		r.ReplyError(protocol.Errorf(protocol.StatusNotMaster, "delay group "+s.opts.Group+": this server is a slave"))
		return
	}
	m.serveSend(r)
}

// serveManifest and serveRead answer a slave's sync requests on a master.
func (s *Server) serveManifest(r *netserver.Request) {
	if m, _ := s.current(); m != nil {
		m.src.serveManifest(r)
		return
	}
	r.ReplyError(protocol.Errorf(protocol.StatusNotMaster, "delay group "+s.opts.Group+": this server is not the master"))
}

func (s *Server) serveOrigin(r *netserver.Request) {
	if m, _ := s.current(); m != nil {
		m.src.serveOrigin(r)
		return
	}
	r.ReplyError(protocol.Errorf(protocol.StatusNotMaster, "delay group "+s.opts.Group+": this server is not the master"))
}

func (s *Server) serveRead(r *netserver.Request) {
	if m, _ := s.current(); m != nil {
		m.src.serveRead(r)
		return
	}
	r.ReplyError(protocol.Errorf(protocol.StatusNotMaster, "delay group "+s.opts.Group+": this server is not the master"))
}

// Close unregisters, stops taking messages, finishes forwarding what is in
// flight (until ctx ends), records it, and closes the store. Messages that
// were due but not forwarded yet are forwarded after the next start.
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { s.closeErr = s.close(ctx) })
	return s.closeErr
}

func (s *Server) close(ctx context.Context) error {
	var errs []error
	if s.member.Load() != nil {
		// A master hands the group to its slave before it stops; the role
		// loop stops (no role change after this).
		if err := s.member.Load().Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	s.life.SetClosing()
	s.roleMu.Lock()
	close(s.stop)
	s.roleMu.Unlock()
	if err := s.server.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := s.closeRole(ctx); err != nil {
		errs = append(errs, err)
	}
	s.closeMeta()
	if s.ops != nil {
		if err := s.ops.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if s.policies != nil {
		errs = append(errs, s.policies.Close())
	}
	s.lg.Info("closed")
	return errors.Join(errs...)
}

func (s *Server) closeRole(ctx context.Context) error {
	s.mu.Lock()
	m, sl := s.master, s.slave
	s.master, s.slave = nil, nil
	s.mu.Unlock()
	if m != nil {
		return m.close(ctx)
	}
	if sl != nil {
		return sl.close()
	}
	return nil
}

func (s *Server) closeMeta() {
	if s.meta != nil {
		s.meta.Close()
	}
}

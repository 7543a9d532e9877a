package metaserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/exposure"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Server is one meta server: a TCP server for brokers and clients, an HTTP
// server for the admin API, console and metrics, and a view of etcd.
type Server struct {
	hist   history // the console's last hour (history.go)
	opts   Options
	lg     *zap.Logger
	keys   keys
	limits protocol.Limits
	token  string // identity admin's secret (the admin token)
	// relayCreds is what the meta server presents to brokers it relays
	// admin requests to (see the transport.New call in New).
	relayCreds auth.Credentials
	refusals   *refusals
	// policiesSent counts CmdPolicy answers that carried a policy.
	policiesSent prometheus.Counter

	etcd *clientv3.Client
	view *view
	// seatWritten is the etcd revision of this server's latest election
	// or takeover: a master's heartbeat is answered from the view only
	// once the view has reached it (registry.go).
	seatWritten atomic.Int64
	store       *store
	transport   *transport.Client
	caller      caller
	metrics     *metrics
	// failoverMetrics: elections, takeovers, eligible sets (election.go).
	failoverMetrics *failoverMetrics

	tcp       *netserver.Server
	httpLn    net.Listener
	httpTLS   *tls.Config // the HTTP listener's (nil: plaintext)
	httpSrv   *http.Server
	id        string
	started   time.Time
	loopCtx   context.Context
	stop      context.CancelFunc
	loops     sync.WaitGroup
	assignMu  sync.Mutex // serialises route assignments
	metaMu    sync.Mutex
	metaLease clientv3.LeaseID
	switchMu  sync.Mutex
	switching map[string]bool // groups with a switchover under way here
	watch     masterWatch     // masters' registration connections (masterwatch.go)

	// closing ends when Close begins: long admin requests watch it.
	closing      context.Context
	startClosing context.CancelFunc

	closeOnce sync.Once
	closeErr  error
}

// Errors of the server's lifecycle.
var (
	// ErrEtcdUnreachable: Start could not read etcd within three etcd
	// timeouts.
	ErrEtcdUnreachable = errors.New("metaserver: etcd unreachable")
)

// New returns a server for opts; it connects nothing until Start. lg may be
// nil.
func New(opts Options, lg *zap.Logger) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if len(opts.EtcdEndpoints) == 0 {
		return nil, fmt.Errorf("%w: etcd_endpoints is empty", ErrInvalidOptions)
	}
	if lg == nil {
		lg = zap.NewNop()
	}
	lg = lg.Named("metaserver")
	s := &Server{opts: opts, lg: lg, keys: keys{opts.Prefix}, limits: protocol.DefaultLimits}
	tok, err := adminToken(&opts, lg)
	if err != nil {
		return nil, err
	}
	s.token = tok
	if s.relayCreds, err = relayCredentials(&opts, tok); err != nil {
		return nil, err
	}
	tlsCfg, err := s.tlsConfigs()
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   opts.EtcdEndpoints,
		DialTimeout: opts.EtcdTimeout,
		TLS:         tlsCfg.etcd,
		Logger:      lg.Named("etcdc").WithOptions(zap.IncreaseLevel(zap.WarnLevel)),
	})
	if err != nil {
		return nil, fmt.Errorf("metaserver: etcd client: %w", err)
	}
	s.etcd = cli
	s.view = newView(s.keys, lg)
	s.store = &store{cli: cli, k: s.keys, v: s.view, timeout: opts.EtcdTimeout, lg: lg}
	// This transport carries every relay to brokers (relay.go,
	// switchover.go); it authenticates each connection as relayCreds.
	tr, err := transport.New(transport.Options{RequestTimeout: opts.BrokerTimeout, Credentials: &s.relayCreds, TLS: tlsCfg.relay}, lg.Named("relay"))
	if err != nil {
		cli.Close()
		return nil, err
	}
	s.transport, s.caller = tr, tr
	s.metrics = newMetrics(s)
	s.refusals = newRefusals(s.metrics.reg, lg.Named("authz"))
	// The TCP port's own refusals (before any handler: no identity yet, a
	// failed CmdAuth) and bounds, as on the brokers: qmq_meta_refused_total
	// and the rest (pkg/netserver LimitsCollector); read at each scrape.
	s.metrics.reg.MustRegister(netserver.LimitsCollector("qmq_meta", func() *netserver.Server { return s.tcp }))
	s.policyMetrics(s.metrics.reg)
	mux := netserver.NewMux()
	mux.HandleFunc(protocol.CmdPolicy, s.servePolicy)
	mux.HandleFunc(protocol.CmdLookup, s.serveLookup)
	mux.HandleFunc(protocol.CmdRegister, s.serveRegister)
	mux.HandleFunc(protocol.CmdClientHeartbeat, s.serveClientHeartbeat)
	mux.HandleFunc(protocol.CmdEligible, s.serveEligible)
	tcpOpts := netserver.Options{Addr: opts.Addr, Auth: s.authority(), RequireAuth: opts.RequireAuth,
		TLS: tlsCfg.server, Insecure: opts.Insecure}
	opts.Limits.Apply(&tcpOpts)
	s.tcp, err = netserver.New(tcpOpts, mux, lg.Named("tcp"))
	if err != nil {
		tr.Close()
		cli.Close()
		return nil, err
	}
	s.loopCtx, s.stop = context.WithCancel(context.Background())
	s.closing, s.startClosing = context.WithCancel(context.Background())
	return s, nil
}

// Start loads the view from etcd, starts watching it, listens on both
// addresses and registers the server under metaservers/.
func (s *Server) Start() error {
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		s.store.watchLoop(s.loopCtx)
	}()
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		s.store.probeLoop(s.loopCtx, min(time.Second, s.opts.EtcdTimeout))
	}()
	ctx, cancel := context.WithTimeout(s.loopCtx, s.opts.StartTimeout)
	defer cancel()
	for {
		if _, loaded := s.view.revision(); loaded {
			break
		}
		select {
		case <-ctx.Done():
			s.stop()
			s.loops.Wait()
			return fmt.Errorf("%w: %v", ErrEtcdUnreachable, s.opts.EtcdEndpoints)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := s.bootstrapAdmin(ctx); err != nil {
		s.stop()
		s.loops.Wait()
		return err
	}
	if err := s.tcp.Start(); err != nil {
		s.stop()
		s.loops.Wait()
		return fmt.Errorf("metaserver: tcp: %w", err)
	}
	ln, err := net.Listen("tcp", s.opts.HTTPAddr)
	if err != nil {
		_ = s.tcp.Close(context.Background())
		s.stop()
		s.loops.Wait()
		return fmt.Errorf("metaserver: http: %w", err)
	}
	if s.httpTLS != nil {
		ln = tls.NewListener(ln, s.httpTLS)
	}
	s.httpLn = ln
	s.httpSrv = &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	s.httpSrv.RegisterOnShutdown(s.startClosing) // long admin requests (switchovers) end so Shutdown need not wait
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		if err := s.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.lg.Error("http server stopped", zap.Error(err))
		}
	}()
	s.started = time.Now().UTC()
	s.id = s.advertised()
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		s.membershipLoop(s.loopCtx)
	}()
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		s.historyLoop(s.loopCtx)
	}()
	s.lg.Info("meta server started", zap.String("tcp", s.Addr().String()), zap.String("http", s.HTTPAddr().String()),
		zap.Strings("etcd", s.opts.EtcdEndpoints), zap.String("prefix", s.opts.Prefix))
	return nil
}

func (s *Server) advertised() string {
	if s.opts.AdvertiseAddr != "" {
		return s.opts.AdvertiseAddr
	}
	return s.Addr().String()
}

// Addr returns the TCP address (nil before Start).
func (s *Server) Addr() net.Addr { return s.tcp.Addr() }

// HTTPAddr returns the HTTP address (nil before Start).
func (s *Server) HTTPAddr() net.Addr {
	if s.httpLn == nil {
		return nil
	}
	return s.httpLn.Addr()
}

// AdminToken returns identity admin's secret: the admin token (Options,
// the token file, or made at New).
func (s *Server) AdminToken() string { return s.token }

// Authority returns the server's view of the policy (updated from etcd).
func (s *Server) Authority() *auth.Authority { return s.authority() }

// bootstrapAdmin makes sure identity admin holds the admin token and waits
// until the view has it, so the token works as soon as Start returns.
func (s *Server) bootstrapAdmin(ctx context.Context) error {
	for {
		rev, err := s.ensureAdmin(ctx, s.token)
		if err == nil {
			if err := s.view.waitRevision(ctx, rev); err != nil {
				return fmt.Errorf("%w: identity admin written at revision %d, not seen by the watch: %v", ErrEtcdUnreachable, rev, err)
			}
			return nil
		}
		if !errors.Is(err, errEtcd) || ctx.Err() != nil {
			return fmt.Errorf("metaserver: identity admin: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("metaserver: identity admin: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Close stops serving, unregisters the server and closes its etcd
// connection. It may be called more than once.
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.startClosing()
		var errs []error
		if s.httpSrv != nil {
			errs = append(errs, s.httpSrv.Shutdown(ctx))
		}
		errs = append(errs, s.tcp.Close(ctx))
		s.stopLoops()
		s.loops.Wait()
		s.metaMu.Lock()
		if s.metaLease != 0 {
			rctx, cancel := context.WithTimeout(ctx, s.opts.EtcdTimeout)
			_, _ = s.etcd.Revoke(rctx, s.metaLease)
			cancel()
		}
		s.metaMu.Unlock()
		errs = append(errs, s.transport.Close(), s.etcd.Close())
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// membershipLoop keeps this server listed under metaservers/ on a lease of
// its own, re-registering whenever the lease is lost.
func (s *Server) membershipLoop(ctx context.Context) {
	rec := metaRecord{TCP: s.id, HTTP: exposure.Reachable(s.HTTPAddr().String(), s.opts.AdvertiseAddr), StartedAt: s.started}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		lease, err := s.grant(ctx, s.opts.BrokerTTL)
		if err == nil {
			_, err = s.store.putJSON(ctx, s.keys.metaServer(s.id), rec, lease)
		}
		var ka <-chan *clientv3.LeaseKeepAliveResponse
		if err == nil {
			ka, err = s.etcd.KeepAlive(ctx, lease)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.lg.Warn("cannot register the meta server; retrying", zap.Error(err), zap.Duration("retry", backoff))
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		s.metaMu.Lock()
		s.metaLease = lease
		s.metaMu.Unlock()
		for range ka { // drain until the lease is lost or ctx ends
		}
		if ctx.Err() == nil {
			s.lg.Warn("meta server lease lost; re-registering")
		}
	}
}

// Package opsserver is the operations HTTP server every QMQ-Go server runs on
// its HTTP port: Prometheus metrics at /metrics, liveness at /healthz (200
// while the process serves HTTP), readiness at /readyz (200 once the owner
// says it is ready, 503 with the reason otherwise), the zap level at
// /loglevel (GET to read, PUT {"level":"debug"} to change), and pprof under
// /debug/pprof/. Owners may mount more handlers (the meta server mounts its
// admin API and console) with Handle before Start.
//
// Exposure: like every QMQ-Go listener (pkg/exposure), a server on a
// non-loopback address needs TLS (Options.TLS) and an authorization hook
// (Options.Authorize), or Options.Insecure; Start refuses otherwise with
// an error wrapping exposure.ErrInsecureListener. Authorize guards the
// endpoints that change the server or reveal its insides: PUT /loglevel
// (write) and /debug/pprof/ (read); /metrics, /healthz, /readyz and GET
// /loglevel stay open (a scraper or a load balancer has no credential).
// An Authorize error answers 403 when it wraps protocol.ErrForbidden, 401
// otherwise.
package opsserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/exposure"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// Options configure the server.
type Options struct {
	// Addr is the listen address (default "127.0.0.1:0"); empty disables
	// nothing: use the default.
	Addr string
	// Registry holds the metrics to serve; nil creates one with the Go and
	// process collectors.
	Registry *prometheus.Registry
	// Ready reports whether the owner is ready for traffic; nil means always.
	Ready func() error
	// Level, when set, is exposed at /loglevel.
	Level *zap.AtomicLevel
	// TLS, when set, serves HTTPS with this config (used for every
	// handshake, so its GetCertificate or GetConfigForClient reloads
	// certificates).
	TLS *tls.Config
	// Authorize, when set, is asked before PUT /loglevel (write true) and
	// /debug/pprof/ (write false): it checks the request's credential (a
	// bearer token, a verified client certificate in r.TLS) and returns
	// an error to refuse. Nil leaves them open, which Start allows on
	// loopback addresses only (or with Insecure).
	Authorize func(r *http.Request, write bool) error
	// Insecure lets the server listen on a non-loopback address without
	// TLS and Authorize.
	Insecure bool
}

// Server is the operations HTTP server.
type Server struct {
	opts Options
	mux  *http.ServeMux
	srv  *http.Server
	ln   net.Listener
	lg   *zap.Logger
	wg   sync.WaitGroup
}

// New builds a server; call Handle to add routes, then Start.
func New(opts Options, lg *zap.Logger) *Server {
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.Registry == nil {
		opts.Registry = NewRegistry()
	}
	if lg == nil {
		lg = zap.NewNop()
	}
	s := &Server{opts: opts, mux: http.NewServeMux(), lg: lg.Named("ops")}
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{Registry: opts.Registry}))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	s.mux.HandleFunc("GET /readyz", s.readyz)
	if opts.Level != nil {
		s.mux.Handle("GET /loglevel", opts.Level)
		s.mux.Handle("/loglevel", s.authorized(true, opts.Level))
	}
	s.mux.Handle("/debug/pprof/", s.authorized(false, http.HandlerFunc(pprof.Index)))
	s.mux.Handle("/debug/pprof/cmdline", s.authorized(false, http.HandlerFunc(pprof.Cmdline)))
	s.mux.Handle("/debug/pprof/profile", s.authorized(false, http.HandlerFunc(pprof.Profile)))
	s.mux.Handle("/debug/pprof/symbol", s.authorized(false, http.HandlerFunc(pprof.Symbol)))
	s.mux.Handle("/debug/pprof/trace", s.authorized(false, http.HandlerFunc(pprof.Trace)))
	return s
}

// authorized asks Options.Authorize before h (when it is set).
func (s *Server) authorized(write bool, h http.Handler) http.Handler {
	if s.opts.Authorize == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.opts.Authorize(r, write); err != nil {
			code := http.StatusUnauthorized
			if errors.Is(err, protocol.ErrForbidden) {
				code = http.StatusForbidden
			}
			s.lg.Warn("refused request", zap.String("path", r.URL.Path), zap.String("method", r.Method),
				zap.String("remote", r.RemoteAddr), zap.Error(err))
			http.Error(w, http.StatusText(code), code)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// NewRegistry returns a registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Registry returns the registry the server serves.
func (s *Server) Registry() *prometheus.Registry { return s.opts.Registry }

// Handle mounts h at pattern (http.ServeMux syntax). Call before Start.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if s.opts.Ready != nil {
		if err := s.opts.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	w.Write([]byte("ready\n"))
}

// Start listens and serves in the background. It refuses a non-loopback
// address without TLS and Authorize unless Options.Insecure (an error
// wrapping exposure.ErrInsecureListener).
func (s *Server) Start() error {
	if err := exposure.Check(s.opts.Addr, s.opts.TLS != nil, s.opts.Authorize != nil, s.opts.Insecure); err != nil {
		return fmt.Errorf("opsserver: %w", err)
	}
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("opsserver: listen %s: %w", s.opts.Addr, err)
	}
	if s.opts.TLS != nil {
		ln = tls.NewListener(ln, s.opts.TLS)
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(1)
	go s.serveLoop()
	return nil
}

func (s *Server) serveLoop() {
	defer s.wg.Done()
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.lg.Error("http server stopped", zap.Error(err))
	}
}

// Addr returns the listening address, once started.
func (s *Server) Addr() net.Addr {
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Close shuts the server down, waiting for requests until ctx ends.
func (s *Server) Close(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	s.wg.Wait()
	return err
}

// Package opsserver is the operations HTTP server every QMQ-Go server runs on
// its HTTP port: Prometheus metrics at /metrics, liveness at /healthz (200
// while the process serves HTTP), readiness at /readyz (200 once the owner
// says it is ready, 503 with the reason otherwise), the zap level at
// /loglevel (GET to read, PUT {"level":"debug"} to change), and pprof under
// /debug/pprof/. Owners may mount more handlers (the meta server mounts its
// admin API and console) with Handle before Start.
package opsserver

import (
	"context"
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
		s.mux.Handle("/loglevel", opts.Level)
	}
	s.mux.HandleFunc("/debug/pprof/", pprof.Index)
	s.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	s.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	s.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	s.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return s
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

// Start listens and serves in the background.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("opsserver: listen %s: %w", s.opts.Addr, err)
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

package delay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/qmq-go/qmq/delay/store"
	"github.com/qmq-go/qmq/pkg/clock"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/opsserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/producer"
	"go.uber.org/zap"
)

// Server is a delay server: the master of one delay group. It stores
// delayed messages in a delay/store and forwards each to a realtime broker
// group of its subject when it falls due.
type Server struct {
	opts     Options
	lg       *zap.Logger
	clk      clock.Clock
	store    *store.Store
	server   *netserver.Server
	ops      *opsserver.Server
	forward  *producer.Producer
	resolver route.Resolver
	metrics  *metrics
	reg      *prometheus.Registry

	meta   *metaclient.Client // route lookups, when forwarding through the meta servers
	keeper *metaclient.Keeper // registration with the meta servers

	marks chan store.Ref      // forwarded and acked: to markLoop
	life  opsserver.Readiness // starting, ready, shutting down (/readyz)

	stopForward chan struct{}
	forwardDone chan struct{}
	marksDone   chan struct{}
	retries     sync.WaitGroup
	closeOnce   sync.Once
	closeErr    error
}

// New opens the server's store (recovering it) and prepares its servers.
// clk nil means the real clock; resolver nil builds one from Options
// (Realtime addresses; the meta server once registered).
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
	s := &Server{
		opts: opts, lg: lg, clk: clk, reg: opsserver.NewRegistry(),
		marks:       make(chan store.Ref, 65536),
		stopForward: make(chan struct{}),
		forwardDone: make(chan struct{}),
		marksDone:   make(chan struct{}),
	}
	s.metrics = newMetrics(s.reg, opts.Group, s)
	if resolver == nil {
		if len(opts.Realtime) > 0 {
			resolver = route.NewStatic(route.Groups(opts.Realtime...), nil)
		} else {
			mc, err := metaclient.New(opts.MetaServers, "delay-"+opts.Group, metaclient.WithLogger(lg))
			if err != nil {
				return nil, fmt.Errorf("delay: %w", err)
			}
			s.meta, resolver = mc, mc
		}
	}
	s.resolver = resolver

	limits := protocol.DefaultLimits
	limits.MaxBody = opts.MaxBody
	sopts := store.DefaultOptions()
	sopts.Flush = store.FlushMode(opts.Flush)
	sopts.FlushInterval = opts.FlushInterval
	sopts.Window = opts.Window
	sopts.Horizon = opts.Horizon
	sopts.Keep = opts.Keep
	sopts.Limits = limits
	st, err := store.Open(opts.DataDir, sopts, clk, lg)
	if err != nil {
		return nil, fmt.Errorf("delay: open store: %w", err)
	}
	s.store = st

	fwd, err := producer.New(producer.WithResolver(resolver), producer.WithLogger(lg), producer.WithLimits(limits),
		producer.WithMaxInFlight(opts.ForwardInFlight), producer.WithSendTimeout(time.Hour), producer.WithQueueSize(65536))
	if err != nil {
		st.Close()
		return nil, err
	}
	s.forward = fwd

	mux := netserver.NewMux()
	mux.HandleFunc(protocol.CmdSend, s.serveSend)
	srv, err := netserver.New(netserver.Options{Addr: opts.Addr, MaxFrameSize: opts.MaxFrameSize}, mux, lg)
	if err != nil {
		fwd.Close(context.Background())
		st.Close()
		return nil, err
	}
	s.server = srv
	if opts.HTTPAddr != "" {
		s.ops = opsserver.New(opsserver.Options{Addr: opts.HTTPAddr, Registry: s.reg, Ready: s.life.Err}, lg)
	}
	return s, nil
}

// Start serves producers and starts forwarding.
func (s *Server) Start() error {
	if err := s.server.Start(); err != nil {
		return fmt.Errorf("delay: %w", err)
	}
	if s.ops != nil {
		if err := s.ops.Start(); err != nil {
			s.server.Close(context.Background())
			return fmt.Errorf("delay: %w", err)
		}
	}
	go s.forwardLoop()
	go s.markLoop()
	if len(s.opts.MetaServers) > 0 {
		addr := s.opts.AdvertiseAddr
		if addr == "" {
			addr = s.server.Addr().String()
		}
		rates := &metaclient.Rates{}
		s.keeper = metaclient.Keep(s.opts.MetaServers, metaclient.Broker{
			Kind: protocol.KindDelay, Role: protocol.RoleMaster, Group: s.opts.Group, Address: addr,
			Report: func() (protocol.GroupState, protocol.BrokerLoad) {
				st := s.store.Stats()
				in, out := rates.Update(int64(st.Appended), int64(st.Dispatched))
				return protocol.GroupReadWrite, protocol.BrokerLoad{InPerSec: in, OutPerSec: out,
					StoredBytes: uint64(max(st.WALWritten, 0)), Pending: uint64(max(st.Pending, 0))}
			},
		}, s.lg, metaclient.WithRequestTimeout(2*time.Second))
	}
	s.life.SetReady()
	s.lg.Info("serving", zap.Stringer("addr", s.server.Addr()), zap.String("flush", s.opts.Flush))
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

// Stats returns the store's statistics.
func (s *Server) Stats() store.Stats { return s.store.Stats() }

// serveSend stores delayed messages; each gets its own status once it is
// durable (or why it was refused: invalid, too large, beyond the horizon).
func (s *Server) serveSend(r *netserver.Request) {
	if s.life.Closing() {
		r.ReplyError(protocol.Errorf(protocol.StatusShuttingDown, "delay group "+s.opts.Group+" is shutting down"))
		return
	}
	req, err := protocol.DecodeSendRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	s.metrics.received.Add(float64(len(req.Messages)))
	s.store.Append(req.Messages, func(results []store.Result) {
		statuses := make([]protocol.Status, len(results))
		for i, res := range results {
			if res.Err != nil {
				st := protocol.StatusOf(res.Err)
				if st == protocol.StatusInternal {
					st = protocol.StatusStoreError
				}
				statuses[i] = st
				s.metrics.rejected.WithLabelValues(st.String()).Inc()
			}
		}
		r.Reply(protocol.StatusOK, protocol.AppendSendResponse(nil, statuses))
	})
}

// forwardLoop sends every due message to a realtime group of its subject.
// The producer retries each until a broker stores it (or answers that it
// already has it: the message keeps its id, so re-forwards are dropped).
func (s *Server) forwardLoop() {
	defer close(s.forwardDone)
	due := s.store.Due()
	for {
		select {
		case <-s.stopForward:
			return
		case batch, ok := <-due:
			if !ok {
				return
			}
			now := s.clk.Now()
			for _, d := range batch {
				if d.DueMillis > 0 {
					s.metrics.fireLateness.Observe(float64(now.UnixMilli()-d.DueMillis) / 1000)
				}
				s.send(d)
			}
		}
	}
}

func (s *Server) send(d store.Due) {
	err := s.forward.SendEncoded(d.Message, func(err error) {
		if err == nil {
			s.metrics.forwarded.Inc()
			if d.DueMillis > 0 {
				s.metrics.lateness.Observe(float64(s.clk.Now().UnixMilli()-d.DueMillis) / 1000)
			}
			s.marks <- d.Ref
			return
		}
		// Not delivered within the producer's send timeout (an hour of
		// retries): keep trying, unless the server is closing (the message
		// stays unmarked and is forwarded again after a restart).
		s.metrics.forwardErrors.Inc()
		s.lg.Warn("forward failed, retrying", zap.Stringer("ref", d.Ref), zap.Error(err))
		if !s.life.Closing() {
			s.retries.Add(1)
			time.AfterFunc(time.Second, func() { defer s.retries.Done(); s.send(d) })
		}
	})
	if err != nil && !errors.Is(err, producer.ErrClosed) {
		// An invalid stored message cannot happen (the store checked it on
		// the way in and on read-back): log it and mark it so it does not
		// come back on every restart.
		s.lg.Error("cannot forward a stored message; dropping it", zap.Stringer("ref", d.Ref), zap.Error(err))
		s.marks <- d.Ref
	}
}

// markLoop records forwarded messages in the dispatch logs, in batches.
func (s *Server) markLoop() {
	defer close(s.marksDone)
	buf := make([]store.Ref, 0, 4096)
	flush := func() {
		if len(buf) == 0 {
			return
		}
		if err := s.store.MarkDispatched(buf); err != nil {
			s.lg.Error("cannot record dispatched messages; they will be forwarded again after a restart", zap.Error(err))
		}
		buf = buf[:0]
	}
	for ref := range s.marks {
		buf = append(buf, ref)
		for drained := false; !drained && len(buf) < cap(buf); {
			select {
			case r, ok := <-s.marks:
				if !ok {
					drained = true
					break
				}
				buf = append(buf, r)
			default:
				drained = true
			}
		}
		flush()
	}
	flush()
}

// Close stops taking messages, finishes forwarding what is in flight (until
// ctx ends), records it, and closes the store. Messages that were due but
// not forwarded yet are forwarded after the next start.
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { s.closeErr = s.close(ctx) })
	return s.closeErr
}

func (s *Server) close(ctx context.Context) error {
	s.life.SetClosing()
	var errs []error
	if s.keeper != nil {
		if err := s.keeper.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.server.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	close(s.stopForward)
	if s.life.Ready() {
		<-s.forwardDone
	}
	if err := s.forward.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("delay: forwards in flight: %w", err))
	}
	s.retries.Wait()
	close(s.marks)
	if s.life.Ready() {
		<-s.marksDone
	}
	if err := s.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("delay: close store: %w", err))
	}
	if s.meta != nil {
		s.meta.Close()
	}
	if s.ops != nil {
		if err := s.ops.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	s.lg.Info("closed")
	return errors.Join(errs...)
}

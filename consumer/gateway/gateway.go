package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/opsserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/producer"
)

// Server is an HTTP gateway: New, Start, Addr, Close.
type Server struct {
	opts Options
	lg   *zap.Logger
	ops  *opsserver.Server
	rd   opsserver.Readiness
	mets *metrics

	// life ends when Close begins: long polls and streams answer at once.
	life     context.Context
	endLife  context.CancelFunc
	inFlight atomic.Int64 // messages being published

	mu         sync.Mutex
	identities map[string]*identity // by credential ("" for the gateway's own)
	closed     bool

	reaperDone chan struct{}
	started    atomic.Bool    // Start ran the reaper
	forgetting sync.WaitGroup // refused identities' clients closing
}

// identity holds the clients of one identity: its producer, its meta
// client (when routes come from meta servers) and its consumer sessions.
type identity struct {
	key      string // in Server.identities
	name     string
	creds    *auth.Credentials
	meta     *metaclient.Client // nil with static brokers
	producer *producer.Producer

	mu        sync.Mutex
	consumers map[string]*consumerClient // by consumer id
}

// New builds a gateway from validated options.
func New(opts Options, lg *zap.Logger) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if lg == nil {
		lg = zap.NewNop()
	}
	if !opts.HTTPTLS.IsZero() && opts.serverTLS == nil {
		cfg, err := tlsconfig.Server(opts.HTTPTLS, false)
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		opts.serverTLS = cfg
	}
	opts.brokerTLS = opts.BrokerTLSConfig
	if !opts.BrokerTLS.IsZero() && opts.brokerTLS == nil {
		cfg, err := tlsconfig.Client(opts.BrokerTLS, "")
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		opts.brokerTLS = cfg
	}
	if opts.CredentialsFile != "" && opts.credentials == nil {
		c, err := auth.ReadCredentialsFile(opts.CredentialsFile)
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		opts.credentials = &c
	}
	s := &Server{
		opts:       opts,
		lg:         lg.Named("gateway"),
		identities: map[string]*identity{},
		reaperDone: make(chan struct{}),
	}
	s.life, s.endLife = context.WithCancel(context.Background())
	reg := opsserver.NewRegistry()
	s.mets = newMetrics(reg, s)
	s.ops = opsserver.New(opsserver.Options{
		Addr: opts.Addr, Registry: reg, Ready: s.rd.Err, TLS: opts.serverTLS,
		Authorize: loopbackOnly, Insecure: opts.Insecure,
	}, lg)
	s.routes()
	return s, nil
}

// loopbackOnly guards the operations endpoints that change the process or
// reveal its insides (PUT /loglevel, /debug/pprof/): the gateway has no
// admin identity of its own, so only callers on the same host get them.
// The API authenticates by passing credentials on to the cluster instead.
func loopbackOnly(r *http.Request, _ bool) error {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if ip := net.ParseIP(host); err == nil && ip != nil && ip.IsLoopback() {
		return nil
	}
	return protocol.Errorf(protocol.StatusForbidden, "operations endpoints answer loopback callers only")
}

// Routes lists the gateway's routes as "METHOD /path" (OpenAPI path
// syntax), those of pkg/opsserver it serves included; openapi.json
// documents exactly these.
func Routes() []string {
	return append([]string{"GET /openapi.json", "GET /healthz", "GET /readyz", "GET /metrics"}, apiRoutes...)
}

var apiRoutes = []string{
	"POST /v1/publish",
	"POST /v1/subjects/{subject}/publish",
	"GET /v1/subjects/{subject}/groups/{group}/messages",
	"GET /v1/subjects/{subject}/groups/{group}/stream",
	"POST /v1/subjects/{subject}/groups/{group}/ack",
	"POST /v1/subjects/{subject}/groups/{group}/nack",
	"POST /v1/subjects/{subject}/scheduled/cancel",
	"POST /v1/subjects/{subject}/scheduled/reschedule",
}

// routes mounts the API on the operations server (which serves /metrics,
// /healthz and /readyz).
func (s *Server) routes() {
	handlers := []handlerFunc{s.publish, s.publishRaw, s.pull, s.stream, s.ack, s.nack, s.cancel, s.reschedule}
	for i, pattern := range apiRoutes {
		s.ops.Handle(pattern, s.handle(handlers[i]))
	}
	s.ops.Handle("GET /openapi.json", http.HandlerFunc(serveOpenAPI))
	s.ops.Handle("/v1/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, newProblem(http.StatusNotFound, protocol.StatusNotFound,
			fmt.Sprintf("no route %s %s (see /openapi.json)", r.Method, r.URL.Path)))
	}))
}

// handlerFunc is an API handler: it has the caller's identity and answers
// a problem or nil (it wrote its answer).
type handlerFunc func(w http.ResponseWriter, r *http.Request, id *identity) *Problem

func (s *Server) handle(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, p := s.identityOf(r)
		if p == nil {
			p = h(w, r, id)
		}
		if p != nil {
			if id != nil && id.key != "" && p.Status == http.StatusUnauthorized {
				s.forget(id) // a refused credential keeps no clients
			}
			s.mets.problems.WithLabelValues(p.QMQStatus).Inc()
			writeProblem(w, p)
		}
	})
}

// identityOf finds (or makes) the clients of the request's identity: its
// bearer or basic credential, passed on to the cluster as a native client
// presents it, else the gateway's own.
func (s *Server) identityOf(r *http.Request) (*identity, *Problem) {
	creds, ok, err := auth.ParseAuthorization(header(r.Header, "Authorization"))
	if err != nil {
		return nil, newProblem(http.StatusUnauthorized, protocol.StatusUnauthenticated, err.Error())
	}
	var c *auth.Credentials
	key := ""
	switch {
	case ok:
		cc := creds // on the heap only when there is one
		c, key = &cc, creds.String()
	case s.opts.RequireCredentials:
		return nil, newProblem(http.StatusUnauthorized, protocol.StatusUnauthenticated,
			"this gateway requires a credential: Authorization: Bearer name:secret")
	default:
		c = s.opts.credentials
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, newProblem(http.StatusServiceUnavailable, protocol.StatusShuttingDown, "the gateway is shutting down")
	}
	if id := s.identities[key]; id != nil {
		return id, nil
	}
	if len(s.identities) >= s.opts.MaxIdentities {
		return nil, busy(fmt.Sprintf("the gateway serves %d identities, its limit", len(s.identities)))
	}
	id, err := s.newIdentity(c)
	if err != nil {
		return nil, errorProblem(err)
	}
	id.key = key
	s.identities[key] = id
	return id, nil
}

func (s *Server) newIdentity(c *auth.Credentials) (*identity, error) {
	id := &identity{creds: c, consumers: map[string]*consumerClient{}}
	if c != nil {
		id.name = c.Name
	}
	popts := []producer.Option{
		producer.WithLogger(s.lg), producer.WithNonBlocking(), producer.WithSendTimeout(s.opts.SendTimeout),
		producer.WithQueueSize(s.opts.MaxInFlight), producer.WithDelayFallback(),
		producer.WithBatch(s.opts.ProducerBatch, 1<<20), producer.WithMaxInFlight(s.opts.ProducerInFlight),
	}
	if len(s.opts.Brokers) > 0 {
		popts = append(popts, producer.WithBrokers(s.opts.Brokers...))
	} else {
		mopts := []metaclient.Option{metaclient.WithLogger(s.lg)}
		if s.opts.brokerTLS != nil {
			mopts = append(mopts, metaclient.WithTLS(s.opts.brokerTLS))
		}
		if c != nil {
			mopts = append(mopts, metaclient.WithCredentials(*c))
		}
		mc, err := metaclient.New(s.opts.MetaServers, "gateway", mopts...)
		if err != nil {
			return nil, err
		}
		id.meta = mc
		popts = append(popts, producer.WithResolver(mc))
	}
	if s.opts.brokerTLS != nil {
		popts = append(popts, producer.WithTLS(s.opts.brokerTLS))
	}
	if c != nil {
		popts = append(popts, producer.WithCredentials(*c))
	}
	p, err := producer.New(popts...)
	if err != nil {
		if id.meta != nil {
			_ = id.meta.Close()
		}
		return nil, err
	}
	id.producer = p
	return id, nil
}

// forget drops id's clients (a credential the cluster refused), so bad
// credentials cannot fill the identity table.
func (s *Server) forget(id *identity) {
	s.mu.Lock()
	if s.identities[id.key] != id {
		s.mu.Unlock()
		return
	}
	delete(s.identities, id.key)
	s.forgetting.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.forgetting.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := id.close(ctx); err != nil {
			s.lg.Debug("closing a refused identity's clients", zap.String("identity", id.name), zap.Error(err))
		}
	}()
}

// consumerOptions are the options of the identity's consumer consumerID.
func (s *Server) consumerOptions(id *identity, consumerID string) []consumer.Option {
	copts := []consumer.Option{consumer.WithLogger(s.lg), consumer.WithConsumerID(consumerID)}
	if id.meta != nil {
		copts = append(copts, consumer.WithResolver(id.meta))
	} else {
		copts = append(copts, consumer.WithBrokers(s.opts.Brokers...))
	}
	if s.opts.brokerTLS != nil {
		copts = append(copts, consumer.WithTLS(s.opts.brokerTLS))
	}
	if id.creds != nil {
		copts = append(copts, consumer.WithCredentials(*id.creds))
	}
	return copts
}

// Start listens and serves.
func (s *Server) Start() error {
	if err := s.ops.Start(); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	s.started.Store(true)
	go s.reaperLoop()
	s.rd.SetReady()
	s.lg.Info("gateway started", zap.Stringer("addr", s.ops.Addr()))
	return nil
}

// Addr returns the HTTP listen address once started.
func (s *Server) Addr() net.Addr { return s.ops.Addr() }

// URL returns the gateway's base URL once started.
func (s *Server) URL() string {
	scheme := "http"
	if s.opts.serverTLS != nil {
		scheme = "https"
	}
	return scheme + "://" + s.ops.Addr().String()
}

// Close stops taking requests, ends long polls and streams (they answer
// what they have), waits for requests in flight until ctx ends, hands every
// consumer session's un-acked messages back to its group and flushes the
// producers.
func (s *Server) Close(ctx context.Context) error {
	s.rd.SetClosing()
	s.endLife()
	err := s.ops.Close(ctx)
	s.mu.Lock()
	s.closed = true
	ids := s.identities
	s.identities = map[string]*identity{}
	s.mu.Unlock()
	if s.started.Load() {
		<-s.reaperDone
	}
	s.forgetting.Wait()
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(ids)+1)
	errs <- err
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- id.close(ctx)
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for e := range errs {
		if e != nil && !errors.Is(e, http.ErrServerClosed) {
			all = append(all, e)
		}
	}
	return errors.Join(all...)
}

func (id *identity) close(ctx context.Context) error {
	id.mu.Lock()
	cs := id.consumers
	id.consumers = map[string]*consumerClient{}
	id.mu.Unlock()
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.close(ctx))
	}
	errs = append(errs, id.producer.Close(ctx))
	if id.meta != nil {
		errs = append(errs, id.meta.Close())
	}
	return errors.Join(errs...)
}

// reaperLoop closes consumer sessions idle past the consumer timeout.
func (s *Server) reaperLoop() {
	defer close(s.reaperDone)
	tick := time.NewTicker(max(10*time.Millisecond, s.opts.ConsumerTimeout/10))
	defer tick.Stop()
	for {
		select {
		case <-s.life.Done():
			return
		case now := <-tick.C:
			s.mu.Lock()
			ids := make([]*identity, 0, len(s.identities))
			for _, id := range s.identities {
				ids = append(ids, id)
			}
			s.mu.Unlock()
			for _, id := range ids {
				s.reap(id, now)
			}
		}
	}
}

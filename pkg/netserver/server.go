package netserver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/busypoll"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// drainPollInterval is how often Close checks whether requests in flight
// have been answered and written.
const drainPollInterval = 2 * time.Millisecond

// gnetStopTimeout bounds gnet's own shutdown when Close's context has
// already ended (gnet checks for shutdown every 500 ms).
const gnetStopTimeout = 5 * time.Second

// listenerStopTimeout bounds the wait for gnet to stop once its listener is
// shut down (it stops within microseconds; Engine.Stop is the fallback).
const listenerStopTimeout = 2 * time.Second

// Server frames requests, hands them to a Handler off its event loops and
// writes the handler's replies, over gnet; with Options.TLS, through a
// crypto/tls session per connection run on the event loop (tls.go).
type Server struct {
	opts    Options
	handler Handler
	inline  InlineHandler // handler, when it serves some commands inline
	lg      *zap.Logger
	gnetLog *gnetLogger

	events events

	// busy counts requests handed to handlers whose replies are not yet
	// written, over all open connections (see Conn); Close drains it.
	busy        atomic.Int64
	serving     sync.WaitGroup // serve workers (serveWorkerLoop)
	workers     chan *Conn     // unbuffered: hands a connection to a parked serve worker
	workersQuit chan struct{}  // closed by Close: parked serve workers exit
	workerIdle  time.Duration  // a parked serve worker exits after this (serveWorkerIdle)
	authing     sync.WaitGroup // CmdAuth goroutines (Conn.authenticate)

	workersStarted atomic.Int64 // serve workers started so far (tests)
	spins          atomic.Int64 // spins after answering on the loop (tests)
	spinsCaught    atomic.Int64 // spins that saw the next request come (tests)
	workersLive    atomic.Int64 // serve workers running or parked (tests)

	conns      atomic.Int64  // open connections
	loops      loops         // per event loop state
	nextConnID atomic.Uint64 // last connection id handed out
	closing    atomic.Bool   // Close has begun: refuse connections and requests
	live       liveConns     // open connections, for the sweep and Close
	identities identityConns // open connections per identity

	partialBytes atomic.Int64 // bytes held in incomplete frames (partial.go)
	chunks       chunkPool    // memory for large incomplete frames
	frames       framePool    // buffers of whole large frames (framepool.go)

	refusedUnauthenticated atomic.Uint64 // Request.Refuse and CountRefusal
	refusedForbidden       atomic.Uint64
	closedPartial          atomic.Uint64
	closedIdle             atomic.Uint64
	closedSlow             atomic.Uint64
	handshakeFailures      atomic.Uint64
	framesChunked          atomic.Uint64 // large frames that came in chunks, not reserved whole

	closeLog     logLimit // "closing connection"
	refusalLog   logLimit // refused requests
	handshakeLog logLimit // failed TLS handshakes

	sweepQuit chan struct{} // closed by Close: sweepLoop returns
	sweepDone chan struct{} // closed when sweepLoop has returned
	sweeping  atomic.Bool   // sweepLoop was started

	// TLS (Options.TLS): a context ended by Close (it ends handshakes)
	// and the handshake goroutines (tls.go).
	tlsCtx     context.Context
	tlsCancel  context.CancelFunc
	handshakes sync.WaitGroup

	mu      sync.Mutex
	started bool
	closed  bool
	addr    net.Addr
	lnFD    int // a duplicate of the listener's descriptor (-1: none)
	eng     gnet.Engine
	booted  chan struct{} // closed in OnBoot
	stopped chan struct{} // closed when gnet.Run has returned
	runErr  error         // gnet.Run's error, set before stopped is closed
}

// New returns a server that will serve h on opts.Addr once started. lg may
// be nil.
func New(opts Options, h Handler, lg *zap.Logger) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("%w: nil Handler", ErrInvalidOptions)
	}
	if lg == nil {
		lg = zap.NewNop()
	}
	s := &Server{
		opts:    opts.withDefaults(),
		handler: h,
		lg:      lg,
		lnFD:    -1,
		booted:  make(chan struct{}),
		stopped: make(chan struct{}),

		workers:     make(chan *Conn),
		workersQuit: make(chan struct{}),
		workerIdle:  serveWorkerIdle,
		sweepQuit:   make(chan struct{}),
		sweepDone:   make(chan struct{}),
	}
	s.frames.init(s.opts.FramePoolBytes, testing.Testing())
	s.closeLog.init(closeLogRate, closeLogBurst)
	s.refusalLog.init(noisyLogRate, noisyLogBurst)
	s.handshakeLog.init(noisyLogRate, noisyLogBurst)
	s.tlsCtx, s.tlsCancel = context.WithCancel(context.Background())
	s.inline, _ = h.(InlineHandler)
	s.gnetLog = newGnetLogger(lg.Named("gnet"))
	s.events.srv = s
	return s, nil
}

// Start listens and returns once the server accepts connections, or with
// the reason it could not (for example the address is in use).
func (s *Server) Start() error {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return ErrServerClosed
	case s.started:
		s.mu.Unlock()
		return ErrAlreadyStarted
	}
	s.started = true
	s.mu.Unlock()

	gopts := []gnet.Option{
		gnet.WithNumEventLoop(s.opts.EventLoops),
		gnet.WithReuseAddr(true),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithReadBufferCap(s.opts.ReadBufferSize),
		gnet.WithLogger(s.gnetLog),
	}
	// No gnet.WithTCPKeepAlive: gnet v2.9.7 then sets keep-alive on the
	// listener's descriptor even after its bind failed and the descriptor
	// was closed, which replaces the bind error with EBADF ("setsockopt:
	// bad file descriptor" for an address in use) and, should another
	// goroutine have reused the number meanwhile, takes that socket for its
	// listener and closes it later. OnOpen sets it on each connection.
	go s.runLoop(gopts)

	// gnet v2.9.7 reports some bind failures only through Run's return
	// value, without calling OnBoot: wait for either (tech.md §1.3 pitfall 7).
	select {
	case <-s.booted:
		s.lg.Info("listening", zap.Stringer("addr", s.Addr()), zap.Bool("tls", s.opts.TLS != nil),
			zap.Bool("requireAuth", s.opts.RequireAuth))
		s.startSweep()
		return nil
	case <-s.stopped:
		err := s.runErr
		if err == nil {
			err = errors.New("gnet stopped before it was listening")
		}
		return fmt.Errorf("netserver: listen on %s: %w", s.opts.Addr, err)
	}
}

// runLoop runs the gnet engine until it stops.
func (s *Server) runLoop(gopts []gnet.Option) {
	err := gnet.Run(&s.events, "tcp://"+s.opts.Addr, gopts...)
	s.runErr = err
	close(s.stopped)
}

// Addr returns the address the server listens on (with the real port when
// Options.Addr asked for port 0), or nil before Start has succeeded.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Close stops accepting connections and requests (new requests are
// answered with StatusShuttingDown), waits until every request in flight has
// been answered and its reply written or ctx ends, then stops gnet, which
// closes every connection. It returns ctx's error, wrapped, when requests
// were still in flight. Close may be called more than once.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	started := s.started
	s.mu.Unlock()
	if !started {
		return nil
	}
	s.closing.Store(true)

	var drainErr error
	select {
	case <-s.booted:
		drainErr = s.drain(ctx)
		s.stopEngine(ctx)
	case <-s.stopped:
	}
	<-s.stopped
	s.mu.Lock()
	if s.lnFD >= 0 { // gnet stopped by itself
		syscall.Close(s.lnFD)
		s.lnFD = -1
	}
	s.mu.Unlock()
	s.tlsCancel()
	s.handshakes.Wait() // every connection is closed, which ends their reads
	s.stopSweep()
	close(s.workersQuit) // every connection is closed: no batch comes any more
	s.serving.Wait()
	s.authing.Wait()
	s.chunks.close()
	if addr := s.Addr(); addr != nil {
		s.lg.Info("closed", zap.Stringer("addr", addr))
	} else {
		s.lg.Info("closed; it never listened")
	}
	s.gnetLog.detach()
	return drainErr
}

// stopEngine stops gnet by shutting its listener down rather than with
// Engine.Stop. Engine.Stop tells the event loops and the acceptor (gnet's
// main reactor) to exit at the same time, so a connection accepted at that
// moment can be handed to a loop that has already exited: it is never
// served nor closed, and its client waits on it forever. A listener shut
// down instead resets the connections waiting to be accepted and refuses
// new ones; the acceptor's next accept fails, it exits, and only then does
// gnet tell the loops to exit (closing their connections), so every
// connection it accepted reached a loop first. gnet logs the failed accept
// as an error; while closing, the server logs gnet's errors at debug level.
// Engine.Stop remains the fallback should the engine not stop.
func (s *Server) stopEngine(ctx context.Context) {
	s.mu.Lock()
	eng, lnFD := s.eng, s.lnFD
	s.lnFD = -1
	s.mu.Unlock()
	err := errors.New("no listener descriptor")
	if lnFD >= 0 {
		defer syscall.Close(lnFD)
		s.gnetLog.quiet()
		err = syscall.Shutdown(lnFD, syscall.SHUT_RDWR)
	}
	if err == nil {
		t := time.NewTimer(listenerStopTimeout)
		defer t.Stop()
		select {
		case <-s.stopped:
			return
		case <-t.C:
			err = errors.New("the engine did not stop")
		}
	}
	s.lg.Warn("stopping gnet without shutting its listener down first", zap.Error(err))
	stopCtx, cancel := ctx, context.CancelFunc(func() {})
	if ctx.Err() != nil {
		stopCtx, cancel = context.WithTimeout(context.Background(), gnetStopTimeout)
	}
	defer cancel()
	if err := eng.Stop(stopCtx); err != nil {
		s.lg.Warn("gnet stop", zap.Error(err))
	}
}

// drain waits until no work is left or ctx ends.
func (s *Server) drain(ctx context.Context) error {
	t := time.NewTicker(drainPollInterval)
	defer t.Stop()
	for {
		n := s.busy.Load()
		if n <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			s.lg.Warn("closing with requests in flight", zap.Int64("busy", n), zap.Error(ctx.Err()))
			return fmt.Errorf("netserver: close with work in flight: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// events is the gnet event handler; its methods run on event loops.
type events struct {
	gnet.BuiltinEventEngine
	srv *Server
}

func (e *events) OnBoot(eng gnet.Engine) gnet.Action {
	s := e.srv
	// Keep a duplicate of the listener's descriptor: it names the address
	// and lets Close shut the listener down (see stopEngine). Taken here,
	// before Start returns, as gnet's listener is gnet's to close.
	lnFD, err := eng.Dup()
	var addr net.Addr
	if err == nil {
		addr, err = socketAddr(lnFD)
	} else {
		lnFD = -1
	}
	if err != nil {
		s.lg.Error("cannot read the listening address", zap.Error(err))
	}
	s.mu.Lock()
	s.eng = eng
	s.addr = addr
	s.lnFD = lnFD
	s.mu.Unlock()
	close(s.booted)
	return gnet.None
}

// socketAddr reads the bound address of a socket.
func socketAddr(fd int) (net.Addr, error) {
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return nil, err
	}
	switch sa := sa.(type) {
	case *syscall.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(sa.Addr[:]).To16(), Port: sa.Port}, nil
	case *syscall.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(sa.Addr[:]), Port: sa.Port}, nil
	}
	return nil, fmt.Errorf("unexpected socket address %T", sa)
}

func (e *events) OnOpen(gc gnet.Conn) ([]byte, gnet.Action) {
	s := e.srv
	c := newConn(s, gc)
	gc.SetContext(c)
	c.loop = s.loops.of(gc.EventLoop())
	c.loop.conns.Add(1)
	if !s.opened(c) {
		return nil, gnet.Close
	}
	if d := s.opts.TCPKeepAlive; d > 0 {
		// As gnet would: probes every fifth of the period, five of them
		// (the kernel counts whole seconds).
		if err := gc.SetKeepAlive(true, max(d, time.Second), max(d/5, time.Second), 5); err != nil {
			s.lg.Debug("cannot set TCP keep-alive", zap.Uint64("conn", c.id), zap.Error(err))
		}
	}
	if s.opts.TLS != nil {
		c.startTLS(gc)
	}
	return nil, gnet.None
}

// opened counts a new connection and reports whether it may stay (it may
// not while the server closes, nor over MaxConns; the reason is logged).
func (s *Server) opened(c *Conn) bool {
	n := s.conns.Add(1)
	s.live.add(c)
	switch {
	case s.closing.Load():
		c.closeReason("server is closing")
		return false
	case n > int64(s.opts.MaxConns):
		c.closeReason("over MaxConns", zap.Int("limit", s.opts.MaxConns))
		return false
	}
	return true
}

func (e *events) OnClose(gc gnet.Conn, err error) gnet.Action {
	c, ok := gc.Context().(*Conn)
	if !ok {
		return gnet.None
	}
	c.loop.conns.Add(-1)
	c.forget(gc.InboundBuffered() > 0 || c.framing.Load(), err)
	return gnet.None
}

// forget forgets a closed connection, on its loop: partial is whether it
// held part of a frame, err why it closed (nil: the server closed it).
func (c *Conn) forget(partial bool, err error) {
	s := c.srv
	s.conns.Add(-1)
	s.live.remove(c)
	if partial && err != nil && !c.reasonLogged.Load() {
		c.closeReason("closed by the client in the middle of a frame", zap.Error(err))
	} else if err != nil {
		s.lg.Debug("connection closed", zap.Uint64("conn", c.id), zap.String("remote", c.remote), zap.Error(err))
	}
	if c.tls != nil {
		_ = c.tls.Close() // ends a handshake in progress
		s.partialBytes.Add(-c.tls.counted)
		c.tls.counted = 0
	}
	c.dropLarge()
	c.holdSmall(0)
	s.identities.release(c)
	c.markClosed()
}

// OnTraffic serves what one socket read brought (gnet calls it once per
// read, so it must not leave whole frames behind): the rest of a large
// frame in progress, then every whole frame (see serveFrames), keeping an
// incomplete last frame; with TLS, what the read's records decrypt to
// (tls.go). Replies made on the loop (inline handlers, requests refused at
// once) are written with one write at the end.
func (e *events) OnTraffic(gc gnet.Conn) gnet.Action {
	c, ok := gc.Context().(*Conn)
	if !ok {
		return gnet.Close
	}
	if c.discarding {
		_, _ = gc.Discard(-1)
		return gnet.None
	}
	if c.tls != nil {
		return c.endTraffic(gc, c.trafficTLS(gc, time.Now()))
	}
	c.received.Add(int64(gc.InboundBuffered() - c.buffered))
	ok = c.readGnet(gc, time.Now())
	c.buffered = gc.InboundBuffered()
	return c.endTraffic(gc, ok)
}

// endTraffic ends a read of the loop: it writes the replies made on the
// loop, runs what inline handlers left for after that write, closes (or
// lingers on) a connection the read refused (ok false), and may spin.
func (c *Conn) endTraffic(gc gnet.Conn, ok bool) gnet.Action {
	s := c.srv
	answered := len(c.loopOut) > 0
	if c.tls != nil {
		c.writeTLS(gc, c.loopOut)
	} else if answered {
		_, _ = gc.Write(c.loopOut) // gnet copies what the socket does not take
	}
	if answered {
		c.resetLoopOut()
		if len(c.afterWrite) > 0 {
			c.runAfterWrites()
		}
		if n := gc.OutboundBuffered(); ok && n > s.opts.MaxOutboundBytes {
			c.closeReason("unsent replies over MaxOutboundBytes (the client does not read)",
				zap.Int("unsent", n), zap.Int("limit", s.opts.MaxOutboundBytes))
			return gnet.Close
		}
	}
	if len(c.afterWrite) > 0 { // left by handlers that made no reply (one-way requests)
		c.runAfterWrites()
	}
	if !ok {
		if c.lingerAfter && c.lingerGnet(gc) {
			return gnet.None
		}
		return gnet.Close
	}
	// Every request read was answered here and the connection is its loop's
	// only one: wait a moment for its next request (see "Spin" in doc.go).
	if answered && c.held.Load() == 0 && s.opts.Spin > 0 && !s.closing.Load() &&
		c.loop.conns.Load() == 1 && gc.OutboundBuffered() == 0 && c.spin.Should() {
		s.spins.Add(1)
		// When bytes come during the spin, gnet's next look at its poller
		// (which does not block right after events) finds them.
		caught := busypoll.Poll(c.fd, s.opts.Spin)
		c.spin.Record(caught)
		if caught {
			s.spinsCaught.Add(1)
		}
	}
	return gnet.None
}

// readGnet serves what gnet has buffered for c. Until the first frame is
// whole it looks at that frame's header only, so a small frame arriving
// over several reads is not copied out of gnet's buffer again on each
// read; a large one is moved into chunks (see partial.go). It reports
// false when the connection must be closed.
func (c *Conn) readGnet(gc gnet.Conn, now time.Time) bool {
	if c.large != nil {
		b, _ := gc.Next(min(gc.InboundBuffered(), c.large.remaining()))
		if !c.fillLarge(b) {
			c.refusePartial(c.large.requestID())
			return false
		}
		if c.readLarge(); c.large.remaining() > 0 {
			return true
		}
		if !c.serveLarge(now) {
			return false
		}
		if gc.InboundBuffered() == 0 {
			return true
		}
	}
	hb, err := gc.Peek(protocol.HeaderSize)
	if err != nil {
		if !c.holdSmall(gc.InboundBuffered()) { // a partial header
			c.refusePartial(0)
			return false
		}
		return true
	}
	h, err := protocol.ParseHeader(hb, c.srv.opts.MaxFrameSize)
	if err != nil {
		c.malformed(hb)
		return false
	}
	if n, total := gc.InboundBuffered(), protocol.HeaderSize+int(h.BodyLen); n < total {
		return c.keepPartial(gc, total, h.RequestID)
	}

	buf, err := gc.Peek(-1)
	if err != nil {
		c.closeReason("reading buffered bytes", zap.Error(err))
		return false
	}
	consumed, _, ok := c.serveFrames(buf, now, nil)
	// What follows the whole frames: read before Discard, which may give
	// buf (a copy gnet made from its pool) back.
	rest, total, requestID := len(buf)-consumed, 0, uint64(0)
	if ok && rest >= protocol.HeaderSize { // its header was checked by serveFrames
		hb := buf[consumed:]
		total, requestID = protocol.HeaderSize+int(binary.BigEndian.Uint32(hb[14:18])), binary.BigEndian.Uint64(hb[6:14])
	}
	_, _ = gc.Discard(consumed)
	switch {
	case !ok:
		return false
	case total > 0:
		return c.keepPartial(gc, total, requestID)
	case !c.holdSmall(rest):
		c.refusePartial(0)
		return false
	}
	return true
}

// keepPartial keeps the incomplete frame of total bytes that starts what
// gnet has buffered (its header checked): a small one where it is, a large
// one moved into chunks. It reports false when the connection must be
// closed.
func (c *Conn) keepPartial(gc gnet.Conn, total int, requestID uint64) bool {
	if total > c.srv.opts.ReadBufferSize {
		b, _ := gc.Next(-1)
		if !c.startLarge(b) {
			c.refusePartial(requestID)
			return false
		}
		if c.readLarge(); c.large.remaining() > 0 {
			return true
		}
		return c.serveLarge(time.Now()) // gnet's buffer is empty: the socket's next bytes wait for its next read
	}
	if !c.holdSmall(gc.InboundBuffered()) {
		c.refusePartial(requestID)
		return false
	}
	return true
}

// runAfterWrite calls w.AfterWrite, logging a panic instead of taking the
// process down, as serve does for handlers.
func (s *Server) runAfterWrite(w AfterWriter) {
	defer func() {
		if p := recover(); p != nil {
			s.lg.Error("after-write panic", zap.Any("panic", p), zap.StackSkip("stack", 2))
		}
	}()
	w.AfterWrite()
}

// serve calls the handler; a panic is logged and answered with
// StatusInternal instead of taking the process down.
func (s *Server) serve(r *Request) {
	defer func() {
		if p := recover(); p != nil {
			s.lg.Error("handler panic", zap.Stringer("command", r.Command()), zap.Uint64("conn", r.Conn.id),
				zap.Any("panic", p), zap.StackSkip("stack", 2))
			r.ReplyError(protocol.Errorf(protocol.StatusInternal, "handler panic"))
		}
	}()
	s.handler.Serve(r)
}

// Stats is a snapshot of a server's load, for metrics and health checks.
type Stats struct {
	// Conns is the number of open connections.
	Conns int64
	// InFlight is the number of requests handed to handlers whose replies
	// are not yet written.
	InFlight int64
	// PartialBytes is the memory held in incomplete frames, counted as
	// MaxPartialBytes counts it.
	PartialBytes int64
	// RefusedUnauthenticated and RefusedForbidden count requests (and
	// messages of sends) refused for their identity: before
	// authentication, a failed CmdAuth, Request.Refuse and
	// Request.CountRefusal.
	RefusedUnauthenticated uint64
	RefusedForbidden       uint64
	// ClosedPartial, ClosedIdle and ClosedSlow count connections closed
	// for MaxPartialBytes, IdleTimeout and MinReadRate.
	ClosedPartial uint64
	ClosedIdle    uint64
	ClosedSlow    uint64
	// HandshakeFailures counts TLS handshakes that failed or timed out.
	HandshakeFailures uint64
	// FramePoolBytes is the idle large-frame buffers kept for reuse;
	// FramesReused counts large frames that took one of them, FramesMade
	// those that needed a new buffer (see Options.FramePoolBytes).
	FramePoolBytes int64
	FramesReused   uint64
	FramesMade     uint64
	// FramesChunked counts large frames that came in chunks and were
	// copied into their buffer once whole, instead of being read into a
	// buffer reserved whole (half of MaxPartialBytes held so, a frame over
	// 4 MiB, or a connection not yet authenticated; partial.go).
	FramesChunked uint64
}

// Stats returns the server's current load.
func (s *Server) Stats() Stats {
	st := Stats{Conns: s.conns.Load(), InFlight: s.busy.Load(), PartialBytes: s.partialBytes.Load(),
		RefusedUnauthenticated: s.refusedUnauthenticated.Load(), RefusedForbidden: s.refusedForbidden.Load(),
		ClosedPartial: s.closedPartial.Load(), ClosedIdle: s.closedIdle.Load(), ClosedSlow: s.closedSlow.Load(),
		HandshakeFailures: s.handshakeFailures.Load()}
	st.FramePoolBytes, st.FramesReused, st.FramesMade = s.frames.stats()
	st.FramesChunked = s.framesChunked.Load()
	return st
}

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

// Server is a gnet server that frames requests, hands them to a Handler off
// the event loop and writes the handler's replies.
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

	workersStarted atomic.Int64 // serve workers started so far (tests)
	spins          atomic.Int64 // spins after answering on the loop (tests)
	spinsCaught    atomic.Int64 // spins that saw the next request come (tests)
	workersLive    atomic.Int64 // serve workers running or parked (tests)

	conns      atomic.Int64  // open connections
	loopConns  loopConns     // open connections per event loop
	nextConnID atomic.Uint64 // last connection id handed out
	closing    atomic.Bool   // Close has begun: refuse connections and requests

	refusedUnauthenticated atomic.Uint64 // Request.Refuse and CountRefusal
	refusedForbidden       atomic.Uint64

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
	}
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
		s.lg.Info("listening", zap.Stringer("addr", s.Addr()))
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
	close(s.workersQuit) // gnet has stopped: no batch comes any more
	s.serving.Wait()
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
	n := s.conns.Add(1)
	c.loopConns = s.loopConns.of(gc.EventLoop())
	c.loopConns.Add(1)
	switch {
	case s.closing.Load():
		c.closeReason("server is closing")
		return nil, gnet.Close
	case n > int64(s.opts.MaxConns):
		c.closeReason("over MaxConns", zap.Int("limit", s.opts.MaxConns))
		return nil, gnet.Close
	}
	if d := s.opts.TCPKeepAlive; d > 0 {
		// As gnet would: probes every fifth of the period, five of them
		// (the kernel counts whole seconds).
		if err := gc.SetKeepAlive(true, max(d, time.Second), max(d/5, time.Second), 5); err != nil {
			s.lg.Debug("cannot set TCP keep-alive", zap.Uint64("conn", c.id), zap.Error(err))
		}
	}
	return nil, gnet.None
}

func (e *events) OnClose(gc gnet.Conn, err error) gnet.Action {
	c, ok := gc.Context().(*Conn)
	if !ok {
		return gnet.None
	}
	e.srv.conns.Add(-1)
	c.loopConns.Add(-1)
	if n := gc.InboundBuffered(); n > 0 && err != nil && !c.reasonLogged.Load() {
		c.closeReason("closed by the client in the middle of a frame", zap.Int("buffered", n), zap.Error(err))
	} else if err != nil {
		e.srv.lg.Debug("connection closed", zap.Uint64("conn", c.id), zap.String("remote", c.remote), zap.Error(err))
	}
	c.markClosed()
	return gnet.None
}

// OnTraffic frames every complete request in the inbound buffer (gnet calls
// it once per socket read, so it must not leave whole frames behind),
// serves inline commands, copies the other frames into one block and hands
// it to the connection's serve goroutine. Replies made on the loop (inline
// handlers, requests refused as busy or shutting down) are collected in the
// connection's loop buffer and written with one write at the end.
func (e *events) OnTraffic(gc gnet.Conn) gnet.Action {
	s := e.srv
	c, ok := gc.Context().(*Conn)
	if !ok {
		return gnet.Close
	}
	// Look at the first frame alone until it is whole, so a large frame
	// arriving in many reads is not copied out of gnet's ring buffer again
	// on every read.
	hb, err := gc.Peek(protocol.HeaderSize)
	if err != nil {
		return gnet.None // a partial header: wait for more bytes
	}
	h, err := protocol.ParseHeader(hb, s.opts.MaxFrameSize)
	if err != nil {
		c.closeReason("malformed frame", zap.Error(err))
		return gnet.Close
	}
	if gc.InboundBuffered() < protocol.HeaderSize+int(h.BodyLen) {
		return gnet.None // a partial body: wait for more bytes
	}

	// Find every whole frame in everything buffered, checking each header.
	buf, err := gc.Peek(-1)
	if err != nil {
		c.closeReason("reading buffered bytes", zap.Error(err))
		return gnet.Close
	}
	consumed, count, bodyBytes := 0, 0, 0
	for len(buf)-consumed >= protocol.HeaderSize {
		hb := buf[consumed:]
		if !wellFormed(hb, s.opts.MaxFrameSize) {
			if _, err := protocol.ParseHeader(hb, s.opts.MaxFrameSize); err != nil {
				c.closeReason("malformed frame", zap.Error(err))
			} else {
				c.closeReason("client sent a response frame", zap.Uint64("request", binary.BigEndian.Uint64(hb[6:14])))
			}
			return gnet.Close
		}
		n := int(binary.BigEndian.Uint32(hb[14:18]))
		if len(hb) < protocol.HeaderSize+n {
			break // wait for the rest
		}
		consumed += protocol.HeaderSize + n
		bodyBytes += n
		count++
	}

	// Serve inline commands now; copy the other requests' frames out of
	// gnet's buffer into one block for the serve goroutine (consecutive
	// frames with one copy).
	var (
		raw      rawBatch
		runStart = -1 // start of the current run of frames to copy
		now      = time.Now()
		closing  = s.closing.Load()
	)
	endRun := func(at int) {
		if runStart >= 0 {
			if raw.frames == nil {
				raw.frames = make([]byte, 0, consumed-runStart)
			}
			raw.frames = append(raw.frames, buf[runStart:at]...)
			runStart = -1
		}
	}
	for off := 0; off < consumed; {
		at := off
		h := decodeHeader(buf[off:])
		body := buf[off+protocol.HeaderSize : off+protocol.HeaderSize+int(h.BodyLen)]
		off += protocol.HeaderSize + int(h.BodyLen)
		switch {
		case closing:
			endRun(at)
			if !h.IsOneWay() {
				c.loopOut = protocol.AppendResponse(c.loopOut, protocol.StatusShuttingDown, h.RequestID, nil)
			}
			continue
		case c.held+raw.count >= s.opts.MaxInFlight:
			endRun(at)
			if !h.IsOneWay() {
				c.loopOut = protocol.AppendResponse(c.loopOut, protocol.StatusBusy, h.RequestID,
					[]byte("netserver: too many requests in flight on this connection"))
			}
			continue
		}
		if s.inline != nil && s.inline.Inline(h.Command()) {
			endRun(at)
			e.serveInline(c, h, body, now)
			continue
		}
		if runStart < 0 {
			runStart = at
		}
		raw.count++
	}
	endRun(consumed)
	_, _ = gc.Discard(consumed)
	if raw.count > 0 {
		raw.arrived = now
		c.held += raw.count
		s.busy.Add(int64(raw.count))
		c.enqueue(raw)
	}
	answered := len(c.loopOut) > 0
	if answered {
		_, _ = gc.Write(c.loopOut) // gnet copies what the socket does not take
		if cap(c.loopOut) > maxSpareReplyBuffer {
			c.loopOut = nil
		} else {
			c.loopOut = c.loopOut[:0]
		}
		if len(c.afterWrite) > 0 {
			e.afterWrite(c)
		}
		if n := gc.OutboundBuffered(); n > s.opts.MaxOutboundBytes {
			c.closeReason("unsent replies over MaxOutboundBytes (the client does not read)",
				zap.Int("unsent", n), zap.Int("limit", s.opts.MaxOutboundBytes))
			return gnet.Close
		}
	}
	if len(c.afterWrite) > 0 { // left by handlers that made no reply (one-way requests)
		e.afterWrite(c)
	}
	// Every request read was answered here and the connection is its loop's
	// only one: wait a moment for its next request (see "Spin" in doc.go).
	if answered && raw.count == 0 && c.held == 0 && s.opts.Spin > 0 && !closing &&
		c.loopConns.Load() == 1 && gc.OutboundBuffered() == 0 && c.spin.Should() {
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

// afterWrite runs the work inline handlers left for after the loop's write
// (Request.AfterWrite), in order.
func (e *events) afterWrite(c *Conn) {
	for i, w := range c.afterWrite {
		c.afterWrite[i] = nil
		e.srv.runAfterWrite(w)
	}
	c.afterWrite = c.afterWrite[:0]
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

// serveInline serves one request on the event loop with the connection's
// reusable inline Request, whose body points into gnet's buffer.
func (e *events) serveInline(c *Conn, h protocol.Header, body []byte, now time.Time) {
	r := &c.inline
	r.Header, r.Body, r.Arrived, r.Conn = h, body, now, c
	r.replied.Store(false)
	e.srv.serve(r)
	if !r.replied.Load() && !r.Header.IsOneWay() {
		e.srv.lg.Error("inline handler returned without replying", zap.Stringer("command", r.Command()))
		r.ReplyError(protocol.Errorf(protocol.StatusInternal, "no reply"))
	}
	r.Body = nil
}

// wellFormed reports whether b starts with the header of a request that
// ParseHeader would accept: the fast path of the framing loop, which calls
// ParseHeader only to name what is wrong.
func wellFormed(b []byte, maxBody int) bool {
	return binary.BigEndian.Uint16(b[0:2]) == protocol.Magic && b[2] == protocol.Version &&
		protocol.Flags(b[3])&^protocol.FlagOneWay == 0 &&
		int64(binary.BigEndian.Uint32(b[14:18])) <= int64(maxBody)
}

// decodeHeader decodes a header that wellFormed accepted.
func decodeHeader(b []byte) protocol.Header {
	return protocol.Header{
		Version:   b[2],
		Flags:     protocol.Flags(b[3]),
		Code:      binary.BigEndian.Uint16(b[4:6]),
		RequestID: binary.BigEndian.Uint64(b[6:14]),
		BodyLen:   binary.BigEndian.Uint32(b[14:18]),
	}
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
	// RefusedUnauthenticated and RefusedForbidden count requests (and
	// messages of sends) refused for their identity (Request.Refuse,
	// Request.CountRefusal).
	RefusedUnauthenticated uint64
	RefusedForbidden       uint64
}

// Stats returns the server's current load.
func (s *Server) Stats() Stats {
	return Stats{Conns: s.conns.Load(), InFlight: s.busy.Load(),
		RefusedUnauthenticated: s.refusedUnauthenticated.Load(), RefusedForbidden: s.refusedForbidden.Load()}
}

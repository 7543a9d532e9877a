package transport

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// errClientClosing is the cause of connections closed by Client.Close:
// their pending requests fail with ErrConnClosed (they may have been sent).
var errClientClosing = errors.New("client closing")

// sweepInterval is how often the client fails requests past their deadline
// (Call also watches its context, so its deadline is exact; Go's timeout is
// honoured within this much).
const sweepInterval = 10 * time.Millisecond

// Client sends requests to servers: one pipelined connection per address,
// one circuit breaker per address. It is safe for concurrent use.
type Client struct {
	opts  Options
	lg    *zap.Logger
	epoch time.Time // deadlines are durations since epoch (monotonic)
	// clock is now() as of the last sweep (at most sweepInterval old): the
	// hot path reads it instead of the clock.
	clock atomic.Int64
	// spins and spinsCaught count the spins of lone Calls for their answer
	// (Options.Spin) and those that saw it come.
	spins, spinsCaught atomic.Uint64

	// Lock order: mu, then a peer's mu, then a connection's mu.
	mu         sync.RWMutex
	peers      map[string]*peer
	closed     bool
	closedFlag atomic.Bool // mirrors closed, readable without mu
	// peerSnap is a copy of peers, replaced (under mu) whenever peers
	// changes, so the request path finds its peer without a lock: the
	// address set changes seldom, requests come all the time.
	peerSnap atomic.Pointer[map[string]*peer]

	stop     chan struct{}
	wg       sync.WaitGroup // sweepLoop and every connection's loops
	syncPool sync.Pool      // *call with a result channel, for Call
}

// New returns a client. lg may be nil.
func New(opts Options, lg *zap.Logger) (*Client, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if lg == nil {
		lg = zap.NewNop()
	}
	c := &Client{
		opts:  opts.withDefaults(),
		lg:    lg,
		epoch: time.Now(),
		peers: make(map[string]*peer),
		stop:  make(chan struct{}),
	}
	c.publishPeersLocked()
	c.syncPool.New = func() any { return &call{ch: make(chan result, 2)} }
	c.wg.Add(1)
	go c.sweepLoop()
	return c, nil
}

func (c *Client) now() time.Duration { return time.Since(c.epoch) }

// coarseNow is now() to within sweepInterval.
func (c *Client) coarseNow() time.Duration { return time.Duration(c.clock.Load()) }

// isClosed reports whether Close has begun; it takes no lock, so it may be
// called with a peer's lock held.
func (c *Client) isClosed() bool { return c.closedFlag.Load() }

// peer returns the state for addr, creating it on first use. A peer
// forgotten meanwhile (removed) may still be returned: its getConn says so
// and the caller looks again.
func (c *Client) peer(addr string) (*peer, error) {
	if c.closedFlag.Load() {
		return nil, ErrClosed
	}
	if p := (*c.peerSnap.Load())[addr]; p != nil {
		return p, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	p := c.peers[addr]
	if p == nil {
		p = newPeer(c, addr)
		c.peers[addr] = p
		c.publishPeersLocked()
	}
	return p, nil
}

// publishPeersLocked replaces the lock-free copy of peers. c.mu is held
// (or c is not yet shared).
func (c *Client) publishPeersLocked() {
	snap := maps.Clone(c.peers)
	if snap == nil {
		snap = map[string]*peer{}
	}
	c.peerSnap.Store(&snap)
}

// BreakerState returns the state of addr's circuit breaker; an address the
// client does not know (or has forgotten as idle) is StateClosed.
func (c *Client) BreakerState(addr string) gobreaker.State {
	p := (*c.peerSnap.Load())[addr]
	if p == nil || p.healthy.Load() { // healthy: closed, last outcome a success
		return gobreaker.StateClosed
	}
	return p.breaker.State()
}

// Call sends a request and waits for its response body. ctx's deadline (or
// Options.RequestTimeout when it has none) bounds the wait. A response with
// a non-OK status returns a *protocol.Error, so errors.Is(err,
// protocol.ErrReadonly) works; transport failures return the sentinels in
// errors.go (NotSent tells whether the request may have reached the
// server); a cancelled ctx returns ctx.Err(). The returned body is the
// caller's. Call reads body until it returns (a large one is written from
// where it is), so body must not change meanwhile. A dial is bounded by
// DialTimeout and ctx; Call may also write queued requests to the socket
// itself, which WriteTimeout bounds.
func (c *Client) Call(ctx context.Context, addr string, cmd protocol.Command, body []byte) ([]byte, error) {
	return c.CallTimeout(ctx, addr, cmd, body, 0)
}

// CallTimeout is Call with timeout (0: Options.RequestTimeout) in place of
// RequestTimeout. Unlike a deadline of ctx's, it costs no timer: it is
// counted from the client's coarse clock and checked by the sweep, as Go's
// timeout is, so it ends within 10 ms of its time.
func (c *Client) CallTimeout(ctx context.Context, addr string, cmd protocol.Command, body []byte, timeout time.Duration) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, ctxError(err)
	}
	if timeout <= 0 {
		timeout = c.opts.RequestTimeout
	}
	cl := c.syncPool.Get().(*call)
	deadline := c.coarseNow() + timeout
	if d, ok := ctx.Deadline(); ok {
		deadline = min(deadline, time.Until(d)+c.now())
	}
	cl.deadline = deadline
	conn, err := c.start(ctx, addr, cmd, 0, body, cl)
	if err != nil {
		c.putCall(cl)
		return nil, err
	}
	res := conn.wait(ctx, cl)
	conn.release(cl)
	c.putCall(cl)
	return res.body, res.err
}

func (c *Client) putCall(cl *call) {
	cl.id, cl.deadline, cl.done, cl.leads, cl.readerGen, cl.borrowed = 0, 0, nil, false, 0, false
	c.syncPool.Put(cl)
}

// ctxError maps a context's error to what Call returns: a passed deadline
// is ErrTimeout (also matching context.DeadlineExceeded); a cancellation is
// returned as is.
func ctxError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return err
}

// Go sends a request without waiting: fn is called once with the response
// body (the caller's) or the error, as Call would return them, within
// timeout (0 means Options.RequestTimeout; the deadline is checked every
// 10 ms). fn runs on whichever goroutine reads the connection (its reader
// goroutine, or a Call to the same address reading for itself), the
// client's timeout sweep, or whichever goroutine notices the connection
// drop, so it must be quick and must not wait for the caller of Go or of
// any Call on this client; it may call Go again. When Go returns
// an error (breaker open, dial failure, client closed, request too large)
// the request was not sent and fn is never called. Go may block while the
// address is being dialled (DialTimeout) or while it writes queued requests
// to the socket itself (WriteTimeout); body is copied before Go returns.
func (c *Client) Go(addr string, cmd protocol.Command, body []byte, timeout time.Duration, fn func(body []byte, err error)) error {
	return c.GoInto(addr, cmd, body, nil, timeout, fn)
}

// GoInto is Go with a buffer for the response: a successful response body
// that fits in cap(into) is read into into (fn's body then aliases it, and
// no body is allocated), a larger one is allocated as Go's is. It lets a
// caller that fetches large bodies in a loop (a slave's sync) reuse them.
// into is the client's from the call until fn runs; once fn has been
// called with a body or a status error, into is the caller's again. After
// a transport error (a timeout, a dropped connection) a reader may still
// be writing into into, so the caller must not reuse it then.
func (c *Client) GoInto(addr string, cmd protocol.Command, body, into []byte, timeout time.Duration, fn func(body []byte, err error)) error {
	if fn == nil {
		return errors.New("transport: Go with a nil callback")
	}
	if timeout <= 0 {
		timeout = c.opts.RequestTimeout
	}
	cl := asyncCallPool.Get().(*call)
	cl.fn, cl.into, cl.deadline = fn, into, c.coarseNow()+timeout
	_, err := c.start(context.Background(), addr, cmd, 0, body, cl) // a dial is bounded by DialTimeout
	if err != nil {
		cl.recycle()
	}
	return err
}

// Notify sends a one-way request: the server answers nothing. It returns
// once the request is queued for writing; a nil error does not mean the
// server received it.
func (c *Client) Notify(ctx context.Context, addr string, cmd protocol.Command, body []byte) error {
	if err := ctx.Err(); err != nil {
		return ctxError(err)
	}
	_, err := c.start(ctx, addr, cmd, protocol.FlagOneWay, body, nil)
	return err
}

// start passes the breaker, finds or dials the connection and queues the
// request; cl (nil for one-way) is pending when it returns nil.
func (c *Client) start(ctx context.Context, addr string, cmd protocol.Command, flags protocol.Flags, body []byte, cl *call) (*conn, error) {
	if len(body) > c.opts.MaxFrameSize {
		return nil, fmt.Errorf("%w: %d bytes > %d", ErrRequestTooLarge, len(body), c.opts.MaxFrameSize)
	}
	for {
		p, err := c.peer(addr)
		if err != nil {
			return nil, err
		}
		done, probe, err := p.allow()
		if err != nil {
			return nil, err
		}
		p.lastUsed.Store(int64(c.coarseNow()))
		conn, err := p.getConn(ctx)
		switch {
		case errors.Is(err, errPeerRemoved):
			done(context.Canceled) // not the address's fault: excluded
			continue
		case err != nil:
			done(err)
			return nil, err
		}
		if cl != nil {
			cl.done = done
			if probe {
				// A half-open breaker's probe succeeds once it is on a
				// connection (see "Circuit breakers" in doc.go); its answer
				// only reports a failure.
				cl.done = p.recordFast
			}
		}
		if err := conn.send(cl, cmd, flags, body); err != nil {
			done(context.Canceled) // the connection went away before the send: retry on a new one
			continue
		}
		if cl == nil || probe {
			done(nil)
		}
		return conn, nil
	}
}

// sweepLoop fails requests past their deadline and forgets idle addresses.
func (c *Client) sweepLoop() {
	defer c.wg.Done()
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	lastIdleCheck := c.now()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		now := c.now()
		c.clock.Store(int64(now))
		c.mu.Lock()
		conns := make([]*conn, 0, len(c.peers))
		for _, p := range c.peers {
			p.mu.Lock()
			if p.conn != nil {
				conns = append(conns, p.conn)
			}
			p.mu.Unlock()
		}
		c.mu.Unlock()
		for _, conn := range conns {
			conn.expire(now)
			conn.idleReader()
		}
		if now-lastIdleCheck >= c.opts.IdleTimeout/10 {
			lastIdleCheck = now
			c.forgetIdle(now)
		}
	}
}

// forgetIdle closes and forgets addresses unused for IdleTimeout that have
// nothing in flight.
func (c *Client) forgetIdle(now time.Duration) {
	var idle []*peer
	c.mu.Lock()
	for addr, p := range c.peers {
		if now-time.Duration(p.lastUsed.Load()) < c.opts.IdleTimeout {
			continue
		}
		p.mu.Lock()
		if p.dialing == nil && (p.conn == nil || p.conn.idle()) {
			p.removed = true
			p.open.Store(nil)
			delete(c.peers, addr)
			idle = append(idle, p)
		}
		p.mu.Unlock()
	}
	if len(idle) > 0 {
		c.publishPeersLocked()
	}
	c.mu.Unlock()
	for _, p := range idle {
		c.lg.Debug("forgetting idle address", zap.String("addr", p.addr))
		p.closeConn(errors.New("idle"))
	}
}

// Close closes every connection, failing requests in flight with
// ErrConnClosed, and waits for the client's goroutines. Later calls fail
// with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.closedFlag.Store(true)
	peers := c.peers
	c.peers = map[string]*peer{}
	c.publishPeersLocked()
	c.mu.Unlock()
	close(c.stop)
	for _, p := range peers {
		p.mu.Lock()
		p.removed = true
		p.open.Store(nil)
		dialing := p.dialing
		p.mu.Unlock()
		if dialing != nil {
			<-dialing
		}
		p.closeConn(errClientClosing)
	}
	c.wg.Wait()
	return nil
}

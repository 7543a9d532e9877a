package metaclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
	"go.uber.org/zap"
)

// Errors of a Client.
var (
	// ErrNoMetaServer: New was given no meta server address.
	ErrNoMetaServer = errors.New("metaclient: no meta server address")
	// ErrClosed: the Client is closed.
	ErrClosed = errors.New("metaclient: closed")
	// ErrNoRoute: no meta server answered and the route is not cached. It
	// wraps the last meta server's error.
	ErrNoRoute = errors.New("metaclient: no route")
)

// Route is a subject's broker groups as one client type sees them.
type Route struct {
	ClientType protocol.ClientType
	Subject    string
	Group      string
	// Version is the meta server's etcd revision for this answer.
	Version uint64
	// Fetched is when the answer arrived.
	Fetched time.Time
	// Offline: an admin took this consumer offline.
	Offline bool
	// Groups are every group of the route with its state and addresses.
	Groups []protocol.RouteGroup
}

// Writable returns the groups producers may send to.
func (r Route) Writable() []protocol.RouteGroup {
	return r.filter(protocol.GroupState.Writable)
}

// Readable returns the groups consumers may pull from.
func (r Route) Readable() []protocol.RouteGroup {
	return r.filter(protocol.GroupState.Readable)
}

func (r Route) filter(keep func(protocol.GroupState) bool) []protocol.RouteGroup {
	out := make([]protocol.RouteGroup, 0, len(r.Groups))
	for _, g := range r.Groups {
		if keep(g.State) && g.Master != "" {
			out = append(out, g)
		}
	}
	return out
}

type routeKey struct {
	clientType protocol.ClientType
	subject    string
	group      string
	clientID   string
}

type cacheEntry struct {
	route       Route
	lastEarly   time.Time
	refreshing  bool
	watched     bool // a watchLoop long-polls it
	lastErr     error
	lastAttempt time.Time
}

// MaxWatchedRoutes bounds the routes a Client watches with long-polling
// lookups (WithWatch); more are refreshed on the interval only.
const MaxWatchedRoutes = 256

// Client looks up routes through a cache. It is safe for concurrent use.
type Client struct {
	cfg      config
	addrs    []string
	clientID string
	static   []protocol.RouteGroup // NewStatic: answer every lookup with these
	own      *transport.Client     // closed by Close when we made it

	mu        sync.Mutex
	preferred int // index into addrs of the last meta server that answered
	cache     map[routeKey]*cacheEntry
	consumers map[consumerKey]*ConsumerRegistration
	watched   int
	closed    bool

	wake chan routeKey
	stop chan struct{}
	// ctx ends at Close (watchLoop's long polls).
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a client of the meta servers at addrs (host:port). clientID
// identifies this process in lookups (consumers: the consumer id).
func New(addrs []string, clientID string, opts ...Option) (*Client, error) {
	if len(addrs) == 0 {
		return nil, ErrNoMetaServer
	}
	c := newClient(opts)
	c.addrs, c.clientID = append([]string(nil), addrs...), clientID
	if c.cfg.caller == nil {
		tr, err := c.cfg.newTransport()
		if err != nil {
			return nil, err
		}
		c.own, c.cfg.caller = tr, tr
	}
	c.wg.Add(1)
	go c.refreshLoop()
	return c, nil
}

// NewStatic returns a client that answers every lookup with groups and
// never asks a meta server: for tests, and for tools pointed at known
// brokers.
func NewStatic(groups []protocol.RouteGroup) *Client {
	c := newClient(nil)
	c.static = append([]protocol.RouteGroup(nil), groups...)
	return c
}

func newClient(opts []Option) *Client {
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{
		cfg:       newConfig(opts),
		cache:     map[routeKey]*cacheEntry{},
		consumers: map[consumerKey]*ConsumerRegistration{},
		wake:      make(chan routeKey, 64),
		stop:      make(chan struct{}),
		ctx:       ctx,
		cancel:    cancel,
	}
}

// Lookup returns the route of subject for clientType (and consumer group,
// for consumers), from the cache when it holds one. Only a key's first
// lookup waits for a meta server.
func (c *Client) Lookup(ctx context.Context, clientType protocol.ClientType, subject, group string) (Route, error) {
	return c.lookup(ctx, routeKey{clientType, subject, group, c.clientID})
}

func (c *Client) lookup(ctx context.Context, k routeKey) (Route, error) {
	if c.static != nil {
		return Route{ClientType: k.clientType, Subject: k.subject, Group: k.group, Groups: append([]protocol.RouteGroup(nil), c.static...)}, nil
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return Route{}, ErrClosed
	}
	if e, ok := c.cache[k]; ok && e.route.Fetched.After(time.Time{}) {
		r := e.route
		c.mu.Unlock()
		return r, nil
	}
	c.mu.Unlock()
	return c.fetch(ctx, k)
}

// Refresh asks for the route again soon, without waiting: call it when a
// broker answers readonly, not routed or not master, or cannot be reached.
// Early refreshes of one route are at least WithMinEarlyRefresh apart.
func (c *Client) Refresh(clientType protocol.ClientType, subject, group string) {
	c.refresh(routeKey{clientType, subject, group, c.clientID})
}

func (c *Client) refresh(k routeKey) {
	if c.static != nil {
		return
	}
	c.mu.Lock()
	e, ok := c.cache[k]
	if !ok || c.closed || e.refreshing || time.Since(e.lastEarly) < c.cfg.minEarlyRefresh {
		c.mu.Unlock()
		return
	}
	e.lastEarly = time.Now()
	e.refreshing = true
	c.mu.Unlock()
	select {
	case c.wake <- k:
	default: // the loop is behind; the periodic refresh will come
		c.mu.Lock()
		e.refreshing = false
		c.mu.Unlock()
	}
}

// fetch asks the meta servers for k's route and caches the answer.
func (c *Client) fetch(ctx context.Context, k routeKey) (Route, error) {
	req := protocol.LookupRequest{ClientType: k.clientType, Subject: k.subject, Group: k.group, ClientID: k.clientID}
	body := protocol.AppendLookupRequest(nil, &req)
	resp, err := c.call(ctx, protocol.CmdLookup, body)
	var lr protocol.LookupResponse
	if err == nil {
		lr, err = protocol.DecodeLookupResponse(resp)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.cache[k]
	if err != nil {
		if e != nil && !e.route.Fetched.IsZero() {
			e.lastErr, e.lastAttempt = err, time.Now()
			return e.route, nil // keep serving the cached route
		}
		return Route{}, fmt.Errorf("%w for %s %s: %w", ErrNoRoute, k.clientType, k.subject, err)
	}
	if e == nil {
		e = &cacheEntry{}
		c.cache[k] = e
	}
	c.storeLocked(k, e, lr)
	if !e.watched && !c.closed && c.cfg.watchWait > 0 && c.watched < MaxWatchedRoutes {
		e.watched = true
		c.watched++
		c.wg.Add(1)
		go c.watchLoop(k)
	}
	return e.route, nil
}

// storeLocked caches lr as k's route, unless it is older than the one
// cached (a lagging meta server). c.mu is held.
func (c *Client) storeLocked(k routeKey, e *cacheEntry, lr protocol.LookupResponse) {
	e.lastErr, e.lastAttempt = nil, time.Now()
	if lr.Version < e.route.Version && time.Since(e.route.Fetched) < c.staleWindow() {
		return // a lagging meta server: keep the newer answer
	}
	e.route = Route{
		ClientType: k.clientType, Subject: k.subject, Group: k.group, Version: lr.Version, Fetched: time.Now(),
		Offline: lr.Flags&protocol.LookupConsumerOffline != 0, Groups: lr.Groups,
	}
}

// watchLoop long-polls k's route (protocol.LookupRequest.Wait) and caches
// every change the meta servers answer with, until Close; it backs off
// 100 ms → 2 s while no meta server answers.
func (c *Client) watchLoop(k routeKey) {
	defer c.wg.Done()
	backoff := time.Duration(0)
	for {
		select {
		case <-c.stop:
			return
		case <-time.After(backoff):
		}
		c.mu.Lock()
		r := c.cache[k].route
		c.mu.Unlock()
		known := protocol.LookupResponse{Groups: r.Groups}
		if r.Offline {
			known.Flags |= protocol.LookupConsumerOffline
		}
		req := protocol.LookupRequest{ClientType: k.clientType, Subject: k.subject, Group: k.group, ClientID: k.clientID,
			Wait: c.cfg.watchWait, Known: protocol.RouteHash(&known)}
		asked := time.Now()
		resp, err := c.callWait(c.ctx, protocol.CmdLookup, protocol.AppendLookupRequest(nil, &req), c.cfg.watchWait+c.cfg.requestTimeout)
		var lr protocol.LookupResponse
		if err == nil {
			lr, err = protocol.DecodeLookupResponse(resp)
		}
		if err != nil {
			backoff = min(max(2*backoff, 100*time.Millisecond), 2*time.Second)
			continue
		}
		backoff = 0
		if protocol.RouteHash(&lr) == req.Known && time.Since(asked) < c.cfg.watchWait/2 {
			// Answered at once with what it had: a server that does not
			// hold long polls. Ask it on the refresh interval instead.
			backoff = c.cfg.refreshInterval
		}
		c.mu.Lock()
		if e := c.cache[k]; e != nil {
			c.storeLocked(k, e, lr)
		}
		c.mu.Unlock()
	}
}

// call sends one request to the meta servers, starting with the preferred
// one and failing over in turn. Answers that are protocol errors about the
// request itself (invalid, bad request) are not retried elsewhere.
func (c *Client) call(ctx context.Context, cmd protocol.Command, body []byte) ([]byte, error) {
	return c.callWait(ctx, cmd, body, c.cfg.requestTimeout)
}

// callWait is call with timeout for each meta server's answer.
func (c *Client) callWait(ctx context.Context, cmd protocol.Command, body []byte, timeout time.Duration) ([]byte, error) {
	c.mu.Lock()
	start := c.preferred
	c.mu.Unlock()
	var lastErr error
	for i := range c.addrs {
		idx := (start + i) % len(c.addrs)
		rctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := c.cfg.caller.Call(rctx, c.addrs[idx], cmd, body)
		cancel()
		if err == nil {
			if idx != start {
				c.mu.Lock()
				c.preferred = idx
				c.mu.Unlock()
			}
			return resp, nil
		}
		lastErr = err
		if errors.Is(err, protocol.ErrInvalid) || errors.Is(err, protocol.ErrBadRequest) || ctx.Err() != nil {
			return nil, err
		}
		c.cfg.lg.Debug("meta server failed; trying the next", zap.String("addr", c.addrs[idx]), zap.Stringer("cmd", cmd), zap.Error(err))
	}
	return nil, lastErr
}

// refreshLoop refreshes every cached route each interval and single routes
// when Refresh asks.
func (c *Client) refreshLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.refreshInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case k := <-c.wake:
			c.refreshOne(k)
		case <-t.C:
			c.mu.Lock()
			keys := make([]routeKey, 0, len(c.cache))
			for k := range c.cache {
				keys = append(keys, k)
			}
			c.mu.Unlock()
			for _, k := range keys {
				c.refreshOne(k)
			}
		}
	}
}

func (c *Client) refreshOne(k routeKey) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.requestTimeout*time.Duration(len(c.addrs)))
	defer cancel()
	go func() {
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	_, _ = c.fetch(ctx, k)
	c.mu.Lock()
	if e, ok := c.cache[k]; ok {
		e.refreshing = false
	}
	c.mu.Unlock()
}

// Close stops the refresh loop, unregisters consumers (best effort) and
// closes the client's own transport.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	regs := make([]*ConsumerRegistration, 0, len(c.consumers))
	for _, r := range c.consumers {
		regs = append(regs, r)
	}
	c.mu.Unlock()
	for _, r := range regs {
		r.Close()
	}
	close(c.stop)
	c.cancel()
	c.wg.Wait()
	if c.own != nil {
		return c.own.Close()
	}
	return nil
}

// staleWindow is how long a cached answer outranks answers with a lower
// version: long enough to ignore a meta server whose view lags, short
// enough that a rebuilt etcd (whose revisions start again from 1) cannot
// pin clients to old routes.
func (c *Client) staleWindow() time.Duration { return 3 * c.cfg.refreshInterval }

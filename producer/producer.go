package producer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/msgid"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/transport"
	"go.uber.org/zap"
)

// Message is a message to send. Subject and Body are what most callers set;
// ID (a sortable unique id) and Created are filled in when empty. Set
// DeliverAt for a delayed or scheduled message.
type Message = protocol.Message

// Property is one key/value pair of a message's properties.
type Property = protocol.Property

// Producer sends messages. It is safe for concurrent use.
type Producer struct {
	cfg       config
	lg        *zap.Logger
	transport *transport.Client
	ownsTrans bool
	meta      *metaclient.Client // made by New for WithMetaServers; Close closes it
	ids       *msgid.Generator
	slab      slab // messages' bytes and pendings, reused

	inbox   *inbox // messages waiting for sendLoop
	results chan *result
	done    chan []completion
	spare   chan []completion // completion slices completeLoop is done with, for publish
	sender  *sender

	mu      sync.Mutex // guards closing
	closing bool
	closed  atomic.Bool   // mirrors closing, for Send's direct path (no lock)
	stop    chan struct{} // closed by Close: sendLoop drains and exits
	wg      sync.WaitGroup
}

// pending is one message on its way: queued, batched, in flight or waiting
// to be retried. Pendings of SendAsync are recycled after their callback.
type pending struct {
	raw     []byte
	chunk   *chunk // the slab chunk raw was carved from (nil: not carved), released when done
	subject string
	kind    route.Kind
	id      string
	// At most one of these reports the outcome: asyncCB(msg, err) for
	// SendAsync, rawCB for SendEncoded, syncCh for Send.
	msg      *Message
	asyncCB  func(*Message, error)
	rawCB    func(error)
	syncCh   chan error
	answered bool // syncCh already got the outcome (from the transport callback)
	deadline time.Time
	tries    int
	lastErr  error
	avoid    string    // group that failed this message last
	retryAt  time.Time // earliest time of the next try
	// traceRoot: a SendAsync message with tracing on whose trace is
	// decided with its send request's (tracing.go, traceInBatch).
	traceRoot bool
}

// New returns a producer. It needs WithMetaServers, WithResolver or
// WithBrokers.
func New(opts ...Option) (*Producer, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	lg := cfg.logger
	if lg == nil {
		lg = zap.NewNop()
	}
	p := &Producer{
		cfg:       cfg,
		lg:        lg.Named("producer"),
		transport: cfg.transport,
		ids:       msgid.New(cfg.now),
		inbox:     newInbox(cfg.queueSize),
		results:   make(chan *result, 1024),
		done:      make(chan []completion, 1024),
		spare:     make(chan []completion, 32),
		stop:      make(chan struct{}),
	}
	if p.transport == nil {
		topts := cfg.transportOpts
		if topts.Spin == 0 {
			topts.Spin = cfg.spin
		}
		if topts.TLS == nil {
			topts.TLS = cfg.tls
		}
		if topts.Credentials == nil && cfg.credentials != nil {
			creds, err := cfg.credentials()
			if err != nil {
				return nil, fmt.Errorf("producer: credentials: %w", err)
			}
			topts.Credentials = creds
		}
		t, err := transport.New(topts, lg)
		if err != nil {
			return nil, fmt.Errorf("producer: %w", err)
		}
		p.transport, p.ownsTrans = t, true
	}
	if len(cfg.metaServers) > 0 {
		mc, err := metaclient.New(cfg.metaServers, clientName("producer"), metaclient.WithCaller(p.transport), metaclient.WithLogger(lg))
		if err != nil {
			if p.ownsTrans {
				p.transport.Close()
			}
			return nil, fmt.Errorf("producer: %w", err)
		}
		p.meta, p.cfg.resolver = mc, mc
	}
	s := newSender(p)
	p.sender = s
	p.wg.Add(2)
	go s.sendLoop()
	go p.completeLoop()
	return p, nil
}

// Send sends msg and waits until a broker has stored it, ctx ends, or the
// send timeout passes. It fills in msg.ID and msg.Created when empty.
func (p *Producer) Send(ctx context.Context, msg *Message) error {
	if p.cfg.tracer != nil {
		return p.sendTraced(ctx, msg)
	}
	return p.send(ctx, msg)
}

func (p *Producer) send(ctx context.Context, msg *Message) error {
	now := p.cfg.now()
	// The message is encoded into the request buffer's scratch space: the
	// direct path's request is copied by the transport, so only a message
	// that takes the queued path needs bytes of its own (and a pending).
	rb := requestPool.Get().(*requestBuf)
	d, err := p.encode(msg, now, rb.raw[:0])
	if err != nil {
		rb.put()
		return err
	}
	rb.raw = d.raw[:0]
	done, err := p.sendDirect(ctx, &d, now, rb)
	if done {
		rb.put()
		return err
	}
	pd, buf, c := p.slab.take(len(d.raw))
	*pd = pending{raw: append(buf, d.raw...), chunk: c, subject: msg.Subject, kind: d.kind, id: msg.ID, msg: msg,
		deadline: now.Add(p.cfg.sendTimeout), avoid: d.avoid}
	rb.put()
	ch := make(chan error, 1)
	pd.syncCh = ch
	if err := p.queuePending(ctx, pd); err != nil {
		return err
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return fmt.Errorf("producer: message %s: %w (it may still be stored)", msg.ID, ctx.Err())
	}
}

// SendAsync queues msg and returns; callback (which may be nil) is called
// once with nil when a broker has stored the message, or with the error that
// ended its tries. Callbacks run one at a time on the producer's completion
// goroutine, so they must be quick. SendAsync blocks while the queue is full
// unless the producer was built WithNonBlocking, when it returns
// ErrQueueFull. An invalid message fails at once, as the returned error.
func (p *Producer) SendAsync(msg *Message, callback func(*Message, error)) error {
	if p.cfg.tracer != nil {
		return p.sendAsyncTraced(msg, callback)
	}
	return p.enqueue(context.Background(), msg, callback, nil)
}

// SendEncoded sends a message already encoded (pkg/protocol), keeping its
// bytes and id, to a realtime group of its subject whatever its deliver-at
// time: the delay server forwards due messages with it. callback is called
// once with the outcome, like SendAsync's. The message is checked (CRC,
// limits) before it is queued; raw must not change until the callback.
func (p *Producer) SendEncoded(raw []byte, callback func(error)) error {
	v, err := protocol.ParseMessage(raw)
	if err == nil {
		err = p.cfg.limits.CheckView(&v)
	}
	if err != nil {
		return fmt.Errorf("producer: encoded message: %w", err)
	}
	pd := p.slab.pending()
	*pd = pending{raw: raw, subject: string(v.Subject), kind: route.Produce, id: string(v.ID), rawCB: callback,
		deadline: p.cfg.now().Add(p.cfg.sendTimeout)}
	return p.queuePending(context.Background(), pd)
}

// SendChecked is SendEncoded for a message the caller has parsed and checked
// already, with its subject and id: the delay server forwards bytes its
// store checked (CRC, limits) when they arrived and again when it read them
// back, so they are not parsed a third time here. raw must be a valid
// message of that subject and id, unchanged until the callback.
func (p *Producer) SendChecked(raw []byte, subject, id string, callback func(error)) error {
	pd := p.slab.pending()
	*pd = pending{raw: raw, subject: subject, kind: route.Produce, id: id, rawCB: callback,
		deadline: p.cfg.now().Add(p.cfg.sendTimeout)}
	return p.queuePending(context.Background(), pd)
}

func (p *Producer) enqueue(ctx context.Context, msg *Message, cb func(*Message, error), ch chan error) error {
	pd, err := p.prepare(msg, cb, ch, p.cfg.now(), nil)
	if err != nil {
		return err
	}
	return p.queuePending(ctx, pd)
}

// directMsg is a message Send encoded for the direct path: it lives on
// Send's stack, and becomes a pending only if it must be queued.
type directMsg struct {
	raw     []byte
	subject string
	id      string
	kind    route.Kind
	avoid   string // the group that failed it (direct path only)
}

// encode fills in msg's id and creation time when empty and encodes it
// into buf, as prepare does for a message that is queued.
func (p *Producer) encode(msg *Message, now time.Time, buf []byte) (directMsg, error) {
	if msg.ID == "" {
		msg.ID = p.ids.NextAt(now)
	}
	if msg.Created.IsZero() {
		msg.Created = now
	}
	raw, err := protocol.AppendMessage(buf, msg, p.cfg.limits)
	if err != nil {
		return directMsg{}, fmt.Errorf("producer: message %s: %w", msg.ID, err)
	}
	d := directMsg{raw: raw, subject: msg.Subject, id: msg.ID, kind: route.Produce}
	if !msg.DeliverAt.IsZero() && msg.DeliverAt.Sub(now) >= p.cfg.delayMin {
		d.kind = route.ProduceDelay
	}
	return d, nil
}

// prepare fills in msg's id and time (now), checks and encodes it into buf
// (nil: bytes of its own, carved from the slab).
func (p *Producer) prepare(msg *Message, cb func(*Message, error), ch chan error, now time.Time, buf []byte) (*pending, error) {
	if msg.ID == "" {
		msg.ID = p.ids.NextAt(now)
	}
	if msg.Created.IsZero() {
		msg.Created = now
	}
	var pd *pending
	var c *chunk
	if buf == nil {
		pd, buf, c = p.slab.take(msg.EncodedSize())
	} else {
		pd = p.slab.pending()
	}
	raw, err := protocol.AppendMessage(buf, msg, p.cfg.limits)
	if err != nil {
		pd.chunk = c
		p.slab.put(pd)
		return nil, fmt.Errorf("producer: message %s: %w", msg.ID, err)
	}
	*pd = pending{raw: raw, chunk: c, subject: msg.Subject, kind: route.Produce, id: msg.ID, msg: msg, asyncCB: cb, syncCh: ch,
		deadline: now.Add(p.cfg.sendTimeout)}
	if !msg.DeliverAt.IsZero() && msg.DeliverAt.Sub(now) >= p.cfg.delayMin {
		pd.kind = route.ProduceDelay
	}
	return pd, nil
}

// sendDirect tries Send's fast path when the producer has nothing queued:
// the caller's goroutine picks a group and sends the message in a request of
// its own, with no hand-off to sendLoop. It reports done=false when the
// message should take the queued path instead (something is queued, no
// group is usable now, or the try failed in a way a retry elsewhere may
// fix: that path retries with back-off until the send timeout). now is
// prepare's clock reading: the request's latency is counted from it. The
// request is built in rb.
func (p *Producer) sendDirect(ctx context.Context, pd *directMsg, now time.Time, rb *requestBuf) (done bool, err error) {
	if p.closed.Load() {
		return true, ErrClosed
	}
	if p.inbox.len() > 0 {
		return false, nil
	}
	s := p.sender
	s.mu.Lock()
	e, err := s.resolve(pd.kind, pd.subject, now)
	var groups []route.Group // e's may be refreshed once s.mu is released
	idx := -1
	tracked := false // the group has a health record (a success must update it)
	if err == nil {
		groups = e.groups
		if idx = s.sel.pick(&e.next, groups, "", now); idx >= 0 {
			tracked = s.sel.tracked(groups[idx].Name)
		}
	}
	s.mu.Unlock()
	if idx < 0 {
		return false, nil
	}
	g := groups[idx]
	rb.msgs[0] = pd.raw
	rb.b = protocol.AppendSendRequest(rb.b[:0], g.Epoch, rb.msgs[:])
	resp, err := p.transport.CallTimeout(ctx, g.Addr, protocol.CmdSend, rb.b, p.cfg.requestTime)
	rb.msgs[0] = nil
	var one [1]protocol.Status
	var st []protocol.Status
	if err == nil {
		if st, err = protocol.DecodeSendResponseInto(one[:0], resp); err == nil && len(st) != 1 {
			err = fmt.Errorf("%w: %d statuses for 1 message", protocol.ErrBadRequest, len(st))
		}
	}
	after := p.cfg.now()
	// A fast answer from a group with no health record changes nothing:
	// the common case takes no lock.
	if err != nil && ctx.Err() == nil || err == nil && (tracked || after.Sub(now) >= latencyLevels[0]) {
		s.mu.Lock()
		if err != nil {
			s.sel.failed(g.Name, after)
		} else {
			s.sel.succeeded(g.Name, after.Sub(now), after)
		}
		s.mu.Unlock()
	}
	switch {
	case ctx.Err() != nil:
		return true, fmt.Errorf("producer: message %s: %w (it may still be stored)", pd.id, ctx.Err())
	case err != nil:
		var pe *protocol.Error
		if errors.As(err, &pe) && !pe.Status.Retryable() {
			return true, fmt.Errorf("producer: message %s to group %s: %w", pd.id, g.Name, err)
		}
	case st[0].Success():
		return true, nil
	case !st[0].Retryable():
		return true, fmt.Errorf("producer: message %s: %w", pd.id, refusal(st[0], g.Name, pd.raw))
	}
	pd.avoid = g.Name
	if st == nil || st[0] == protocol.StatusReadonly || st[0] == protocol.StatusNotRouted || st[0] == protocol.StatusNotMaster ||
		st[0] == protocol.StatusStaleEpoch {
		s.invalidateRoute(pd.kind, pd.subject)
	}
	return false, nil
}

// requestBuf is Send's encoded message (raw) and sendDirect's request body
// (b), reused: the transport is done with a body when Call returns.
type requestBuf struct {
	raw  []byte
	b    []byte
	msgs [1][]byte
}

var requestPool = sync.Pool{New: func() any { return new(requestBuf) }}

// put returns rb to its pool unless it grew too large to keep.
func (rb *requestBuf) put() {
	if cap(rb.b) <= maxPooledRequest && cap(rb.raw) <= maxPooledRequest {
		requestPool.Put(rb)
	}
}

// maxPooledRequest is the largest request buffer kept for reuse.
const maxPooledRequest = 64 << 10

func (p *Producer) queuePending(ctx context.Context, pd *pending) error {
	return p.inbox.push(ctx, pd, p.cfg.nonBlocking)
}

// completion is a message's outcome, to report.
type completion struct {
	pd  *pending
	err error
}

func (p *Producer) completeLoop() {
	defer p.wg.Done()
	for batch := range p.done {
		for _, c := range batch {
			pd := c.pd
			switch {
			case pd.syncCh != nil:
				pd.syncCh <- c.err
			case pd.asyncCB != nil:
				pd.asyncCB(pd.msg, c.err)
			case pd.rawCB != nil:
				pd.rawCB(c.err)
			}
		}
		// The messages are done: their bytes and pendings go back for
		// reuse, a batch under one lock each.
		p.slab.putDone(batch)
		clear(batch)
		select {
		case p.spare <- batch[:0]:
		default:
		}
	}
}

// Close stops taking messages, sends what is queued and waits for every
// message to be stored or to fail, until ctx ends; messages still unsent
// then fail with ErrClosed.
func (p *Producer) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return nil
	}
	p.closing = true
	p.closed.Store(true)
	p.mu.Unlock()
	p.inbox.close() // every message Close must send is in
	close(p.stop)

	finished := make(chan struct{})
	go func() { p.wg.Wait(); close(finished) }()
	var err error
	select {
	case <-finished:
	case <-ctx.Done():
		err = fmt.Errorf("producer: close: %w", ctx.Err())
		p.abort()
		if p.ownsTrans {
			p.transport.Close() // fails requests in flight at once
		}
		<-finished
	}
	if p.meta != nil {
		_ = p.meta.Close()
	}
	if p.ownsTrans {
		p.transport.Close()
	}
	return err
}

// abort makes sendLoop fail everything left with ErrClosed.
func (p *Producer) abort() {
	select {
	case p.results <- &result{abort: true}:
	case <-time.After(time.Second):
	}
}

// IsRetryable reports whether err, returned for a message, may succeed if
// the message is sent again later.
func IsRetryable(err error) bool {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Status.Retryable()
	}
	return errors.Is(err, ErrSendTimeout) || errors.Is(err, transport.ErrTimeout) || errors.Is(err, transport.ErrConnClosed)
}

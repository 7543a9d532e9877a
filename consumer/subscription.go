package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/jitter"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
	"go.uber.org/zap"
)

var errNacked = errors.New("consumer: nacked")

// Subscription is one (subject, group) a consumer receives.
type Subscription struct {
	c       *Consumer
	subject string
	group   string
	handler Handler // nil for a Puller
	cfg     subConfig
	lg      *zap.Logger

	work     chan *delivery // pulled messages waiting for a handler (or Pull)
	stopPull chan struct{}  // closed by Close: pull loops stop
	stopWork chan struct{}  // closed by Close after the pull loops: handlers stop
	// workStopped is set as stopWork closes, for handlers that take
	// messages without a select.
	workStopped atomic.Bool
	handlerCx   context.Context
	cancelCx    context.CancelFunc

	mu      sync.Mutex
	pullers map[pullerKey]*puller
	closed  bool

	registration *metaclient.ConsumerRegistration // with the meta servers, when the resolver is a meta client

	pullWG    sync.WaitGroup // routeLoop and pull loops
	workWG    sync.WaitGroup // handler loops
	retryWG   sync.WaitGroup // retry publishes in flight
	closeOnce sync.Once
	closeErr  error
}

type pullerKey struct {
	brokerGroup string
	subject     string
}

func newSubscription(c *Consumer, subject, group string, h Handler, cfg subConfig) *Subscription {
	ctx, cancel := context.WithCancel(context.Background())
	// Room for a whole pull or two, so pull loops hand over a batch and
	// pull again while handlers work through it.
	buffer := max(cfg.concurrency, 2*cfg.batch)
	return &Subscription{
		c: c, subject: subject, group: group, handler: h, cfg: cfg,
		lg:        c.lg.With(zap.String("subject", subject), zap.String("group", group)),
		work:      make(chan *delivery, buffer),
		stopPull:  make(chan struct{}),
		stopWork:  make(chan struct{}),
		handlerCx: ctx,
		cancelCx:  cancel,
		pullers:   map[pullerKey]*puller{},
	}
}

// Subject returns the subscribed subject.
func (s *Subscription) Subject() string { return s.subject }

// Group returns the consumer group.
func (s *Subscription) Group() string { return s.group }

// consumerRegistrar is a resolver that can register consumers with the meta
// servers (pkg/metaclient), so operators see them and can take them offline.
type consumerRegistrar interface {
	RegisterConsumer(subject, group, clientID string) *metaclient.ConsumerRegistration
}

// offline reports whether an admin took this consumer offline.
func (s *Subscription) offline() bool {
	return s.registration != nil && s.registration.Offline()
}

func (s *Subscription) start() {
	if r, ok := s.c.cfg.resolver.(consumerRegistrar); ok && !s.cfg.broadcast {
		s.registration = r.RegisterConsumer(s.subject, s.group, s.c.id)
	}
	if s.handler != nil {
		for i := 0; i < s.cfg.concurrency; i++ {
			s.workWG.Add(1)
			go s.handlerLoop()
		}
	}
	s.refreshRoutes()
	s.pullWG.Add(1)
	go s.routeLoop()
}

// routeLoop adds pull loops for new broker groups and stops those of groups
// that left the route.
func (s *Subscription) routeLoop() {
	defer s.pullWG.Done()
	t := time.NewTicker(s.c.cfg.routeRefresh)
	defer t.Stop()
	for {
		select {
		case <-s.stopPull:
			return
		case <-t.C:
			s.refreshRoutes()
		}
	}
}

func (s *Subscription) refreshRoutes() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	groups, err := s.c.cfg.resolver.Resolve(ctx, route.Request{Kind: route.Consume, Subject: s.subject, Group: s.group, ClientID: s.c.id})
	cancel()
	if err != nil {
		s.lg.Warn("cannot resolve broker groups", zap.Error(err))
		return
	}
	subjects := []string{s.subject}
	if !s.cfg.broadcast && s.cfg.retrySubject {
		subjects = append(subjects, protocol.RetrySubject(s.subject, s.group))
	}
	want := map[pullerKey]route.Group{}
	for _, g := range groups {
		if !g.Readable() {
			continue
		}
		for _, subj := range subjects {
			want[pullerKey{g.Name, subj}] = g
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for k, p := range s.pullers {
		if g, ok := want[k]; !ok {
			p.stop(true)
			delete(s.pullers, k)
		} else {
			p.setGroup(g)
		}
	}
	for k, g := range want {
		if s.pullers[k] == nil {
			p := newPuller(s, g, k.subject)
			s.pullers[k] = p
			p.start()
		}
	}
}

func (s *Subscription) invalidate() {
	s.c.cfg.resolver.Invalidate(route.Request{Kind: route.Consume, Subject: s.subject, Group: s.group, ClientID: s.c.id})
}

// handlerLoop runs the handler on pulled messages.
func (s *Subscription) handlerLoop() {
	defer s.workWG.Done()
	for {
		// Without a select while messages wait: a select per message cost
		// a busy consumer a tenth of its CPU. workStopped stops a handler
		// that keeps finding messages; it is looked at before a message is
		// taken, never after: a message taken is handled, so the messages
		// handled are always a prefix of the buffer's order and the final
		// ack covers them all. (Dropping a taken message left a gap when
		// another handler had meanwhile handled the ones after it: the ack
		// stopped at the gap, and the handled messages beyond it went back
		// to the group and were delivered again.) The messages never taken
		// stay un-acked and go back to the group.
		if s.workStopped.Load() {
			return
		}
		var d *delivery
		select {
		case d = <-s.work:
		default:
			select {
			case <-s.stopWork:
				return
			case d = <-s.work:
			}
		}
		s.handle(d)
	}
}

func (s *Subscription) handle(d *delivery) {
	m := d.msg
	ic := s.cfg.idempotency
	if ic != nil {
		proceed, err := ic.Begin(s.handlerCx, m)
		if err != nil {
			d.finish(fmt.Errorf("idempotency check: %w", err))
			return
		}
		if !proceed {
			d.finish(nil)
			return
		}
	}
	var err error
	if s.c.cfg.tracer != nil {
		err = s.handleTraced(d)
	} else {
		err = s.safeHandle(s.handlerCx, m)
	}
	if ic != nil {
		ic.End(s.handlerCx, m, err)
	}
	d.finish(err)
}

func (s *Subscription) safeHandle(ctx context.Context, m *Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("consumer: handler panicked: %v", r)
			s.lg.Error("handler panicked", zap.String("id", m.ID), zap.Any("panic", r))
		}
	}()
	return s.handler(ctx, m)
}

// backoff returns the retry delay after attempts failed deliveries:
// retryBase doubling up to retryMax, jittered (pkg/jitter), so messages that
// failed together are not redelivered together.
func (s *Subscription) backoff(attempts int) time.Duration {
	return jitter.Nth(s.cfg.retryBase, s.cfg.retryMax, attempts)
}

// retry publishes a failed message again (to the retry subject, or to the
// dead-letter subject past MaxAttempts) and calls done once it is stored.
// Broadcast subscriptions retry in process instead.
func (s *Subscription) retry(d *delivery, cause error, done func()) {
	m := d.msg
	attempts := m.Attempts + 1 // deliveries that failed, this one included
	delay, chosen := retryDelay(cause)
	if !chosen {
		delay = s.backoff(attempts)
	}
	if s.cfg.broadcast {
		s.retryLocal(d, attempts, delay, done)
		return
	}
	pm, err := protocol.DecodeMessage(d.raw)
	if err != nil { // cannot happen: the bytes were parsed on arrival
		s.lg.Error("cannot re-decode message for retry", zap.String("id", m.ID), zap.Error(err))
		done()
		return
	}
	pm.Attempts = uint16(min(attempts, 65535))
	pm.DeliverAt = time.Time{}
	failure := protocol.Failure{Error: errorText(cause), FailedAt: s.c.cfg.now()}
	if attempts >= s.cfg.maxAttempts {
		failure.DeadWhy = fmt.Sprintf("%d attempts failed (max attempts %d)", attempts, s.cfg.maxAttempts)
	}
	protocol.RecordFailure(pm, failure)
	if attempts >= s.cfg.maxAttempts {
		pm.Subject = protocol.DeadSubject(s.subject, s.group)
		s.lg.Warn("message goes to dead letters", zap.String("id", m.ID), zap.Int("attempts", attempts), zap.Error(cause))
	} else {
		pm.Subject = protocol.RetrySubject(s.subject, s.group)
		pm.DeliverAt = s.c.cfg.now().Add(delay)
	}
	s.retryWG.Add(1)
	var send func()
	send = func() {
		err := s.c.retries.SendAsync(pm, func(_ *protocol.Message, err error) {
			if err != nil {
				s.lg.Warn("retry publish failed, trying again", zap.String("id", m.ID), zap.Error(err))
				time.AfterFunc(time.Second, send)
				return
			}
			s.retryWG.Done()
			done()
		})
		if err != nil {
			// Closed or invalid: the message stays un-acked and comes back.
			s.lg.Warn("cannot publish retry", zap.String("id", m.ID), zap.Error(err))
			s.retryWG.Done()
		}
	}
	send()
}

// errorText is the text a retried or dead copy records for cause.
func errorText(cause error) string {
	if cause == nil {
		return "handler failed"
	}
	return cause.Error()
}

// retryLocal re-runs a broadcast handler after delay, up to MaxAttempts.
func (s *Subscription) retryLocal(d *delivery, attempts int, delay time.Duration, done func()) {
	if attempts >= s.cfg.maxAttempts {
		s.lg.Warn("broadcast message dropped after max attempts", zap.String("id", d.msg.ID), zap.Int("attempts", attempts))
		done()
		return
	}
	d.msg.Attempts = attempts
	s.retryWG.Add(1)
	time.AfterFunc(delay, func() {
		defer s.retryWG.Done()
		select {
		case s.work <- d:
		case <-s.stopPull:
		}
	})
}

// Close stops pulling, lets running handlers finish, acks what finished
// (handing the rest back to the group at once) and waits, until ctx ends.
func (s *Subscription) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { s.closeErr = s.close(ctx) })
	return s.closeErr
}

func (s *Subscription) close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	pullers := make([]*puller, 0, len(s.pullers))
	for _, p := range s.pullers {
		pullers = append(pullers, p)
	}
	s.mu.Unlock()
	close(s.stopPull)
	for _, p := range pullers {
		p.stopPulling()
	}
	s.pullWG.Wait()
	s.workStopped.Store(true)
	close(s.stopWork)
	var err error
	if !waitTimeout(ctx, &s.workWG) {
		err = fmt.Errorf("consumer: close %s/%s: handlers still running: %w", s.subject, s.group, ctx.Err())
	}
	s.cancelCx()
	if err == nil && !waitTimeout(ctx, &s.retryWG) {
		err = fmt.Errorf("consumer: close %s/%s: retries unpublished: %w", s.subject, s.group, ctx.Err())
	}
	for _, p := range pullers {
		p.stop(true)
	}
	if s.registration != nil {
		s.registration.Close()
	}
	s.c.forget(s)
	return err
}

func waitTimeout(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

package producer

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/qmq-go/qmq/pkg/jitter"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// routeTTL is how long the sender reuses a resolved route before asking the
// resolver again (the resolver has its own cache; this one saves the call).
const routeTTL = time.Second

// maxDrain bounds how many queued messages sendLoop batches before it looks
// at results again.
const maxDrain = 4096

type routeKey struct {
	kind    route.Kind
	subject string
}

// routeEntry is a subject's cached route and its round-robin position
// (selector.pick): one map access per message finds both, which counts
// when messages spread over thousands of subjects (the subjects bench
// suite: 10,000).
type routeEntry struct {
	groups  []route.Group
	fetched time.Time
	next    uint32
}

// routeCache holds the routes of one kind by subject (a string key hashes
// faster than a struct).
type routeCache [2]map[string]*routeEntry // Produce, ProduceDelay

func (c *routeCache) of(kind route.Kind) map[string]*routeEntry {
	if kind == route.ProduceDelay {
		return c[1]
	}
	return c[0]
}

// batch is the send request being built for one group.
type batch struct {
	group   route.Group
	body    protocol.SendBatch
	msgs    []*pending
	started time.Time
	// With tracing on, the send span of the request (nil until a
	// SendAsync message joins it) and, when it is sampled, the properties
	// carrying its context (tracing.go).
	span       trace.Span
	traceProps []protocol.Property
}

// result is the outcome of one send request, handed from the transport's
// callback to sendLoop.
type result struct {
	group  route.Group
	msgs   []*pending
	body   []byte
	err    error
	sentAt time.Time
	// statuses, when set, were decoded by the transport callback (which
	// already answered the waiting Send calls whose messages are stored).
	statuses []protocol.Status
	// counted: the request holds one of its group's in-flight slots.
	counted bool
	abort   bool
	span    trace.Span // the request's send span (tracing.go), or nil
}

// sender is sendLoop's state; only sendLoop touches it, except sel and
// the route cache (routes, sharedGroups, lastKey, lastRoute), which Send's
// direct path shares under mu.
type sender struct {
	p            *Producer
	mu           sync.Mutex // guards sel and the route cache
	sel          *selector
	routes       routeCache
	sharedGroups []route.Group // the groups resolved last (resolve)
	lastKey      routeKey      // the key of lastRoute, the route resolved last:
	lastRoute    *routeEntry   // most sends ask for the same one again
	subjectFree  bool          // the resolver's answers do not depend on the subject (cacheKey)
	batches      map[string]*batch
	inFlight     map[string]int
	retries      []*pending
	outstanding  int
	blocked      bool      // a full batch waits for an in-flight slot: stop reading the queue
	aborted      bool      // Close gave up waiting: fail what is left with ErrClosed
	now          time.Time // read once per turn of sendLoop: clock reads cost here
	completions  []completion
	taken        []*pending // messages taken from the inbox, placed up to next
	next         int
	drained      bool         // the last take emptied the inbox
	spareMsgs    [][]*pending // message lists of answered requests, for new batches
	timer        *time.Timer
}

func newSender(p *Producer) *sender {
	return &sender{
		p:      p,
		sel:    newSelector(p.transport.BreakerState),
		routes: routeCache{{}, {}},
		// set once: the resolver is fixed for the producer's life
		subjectFree: route.IsSubjectFree(p.cfg.resolver),
		batches:     map[string]*batch{},
		inFlight:    map[string]int{},
		drained:     true,
		timer:       time.NewTimer(time.Hour),
	}
}

func (s *sender) sendLoop() {
	p := s.p
	defer p.wg.Done()
	defer close(p.done)
	stop := p.stop
	closing := false
	for {
		if (closing || s.aborted) && s.outstanding == 0 && s.queueEmpty() {
			return
		}
		wake := p.inbox.wake
		switch {
		case s.blocked:
			wake = nil
		case s.next < len(s.taken) || !s.drained:
			wake = ready // more to take: no need to wait
		}
		select {
		case <-wake:
			s.now = s.p.cfg.now()
			s.drainQueue()
		case r := <-p.results:
			if r.abort {
				s.abortAll()
				break
			}
			s.handle(r)
			s.recycleMsgs(r.msgs)
		case <-s.timer.C:
		case <-stop:
			closing, stop = true, nil
		}
		s.dueRetries()
		s.flush(closing || s.queueEmpty())
		s.publish()
		s.resetTimer()
	}
}

// ready is a closed channel: sendLoop's wake case when it has more to take.
var ready = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// drainQueue batches what is queued: what is left of the last take, else
// up to maxDrain messages taken from the inbox now, until a full batch
// has to wait for an in-flight slot (blocked).
func (s *sender) drainQueue() {
	if s.next == len(s.taken) {
		s.taken = s.p.inbox.take(s.taken[:0], maxDrain)
		s.next = 0
		s.drained = len(s.taken) < maxDrain
		s.outstanding += len(s.taken)
	}
	for s.next < len(s.taken) && !s.blocked {
		pd := s.taken[s.next]
		s.taken[s.next] = nil
		s.next++
		s.place(pd)
	}
}

// queueEmpty reports whether no message waits to be batched: none is left
// of the last take, that take emptied the inbox, and no message has
// arrived since (it would have woken sendLoop). A stale wake makes it
// report false for one more turn of sendLoop.
func (s *sender) queueEmpty() bool {
	return s.next == len(s.taken) && s.drained && len(s.p.inbox.wake) == 0
}

// place puts pd into the batch of the group chosen for it, or schedules a
// retry when no group is usable now.
func (s *sender) place(pd *pending) {
	now := s.now
	if now.IsZero() {
		now = s.p.cfg.now()
	}
	s.mu.Lock()
	e, err := s.resolve(pd.kind, pd.subject, now)
	var groups []route.Group // e's may be refreshed once s.mu is released
	idx := -1
	if err == nil {
		groups = e.groups
		idx = s.sel.pick(&e.next, groups, pd.avoid, now)
	}
	s.mu.Unlock()
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) && !pe.Status.Retryable() {
			// The meta servers refuse this producer (unauthenticated,
			// forbidden): no retry will change that.
			s.complete(pd, fmt.Errorf("message %s not stored: looking up its route: %w", pd.id, err))
			return
		}
		s.retry(pd, err, now)
		return
	}
	if idx < 0 {
		s.retry(pd, fmt.Errorf("%w: no writable group for %q", protocol.ErrUnavailable, pd.subject), now)
		return
	}
	g := groups[idx]
	b := s.batches[g.Name]
	if b == nil {
		b = &batch{}
		s.batches[g.Name] = b
	}
	if len(b.msgs) == 0 {
		b.group = g
		b.started = now
		b.body.Reset(g.Epoch)
	}
	if pd.traceRoot {
		s.traceInBatch(b, pd)
	}
	b.body.AddEncoded(pd.raw)
	if b.msgs == nil {
		b.msgs = s.takeMsgs()
	}
	b.msgs = append(b.msgs, pd)
	if s.full(b) {
		s.send(b)
	}
}

// takeMsgs returns an empty message list for a batch.
func (s *sender) takeMsgs() []*pending {
	if n := len(s.spareMsgs); n > 0 {
		m := s.spareMsgs[n-1]
		s.spareMsgs[n-1] = nil
		s.spareMsgs = s.spareMsgs[:n-1]
		return m
	}
	return make([]*pending, 0, min(s.p.cfg.batchMessages, 256))
}

// recycleMsgs keeps the message list of an answered request (handled: its
// messages are done or waiting for a retry) for a new batch.
func (s *sender) recycleMsgs(msgs []*pending) {
	if len(s.spareMsgs) < 2*s.p.cfg.maxInFlight && cap(msgs) <= 4096 {
		clear(msgs)
		s.spareMsgs = append(s.spareMsgs, msgs[:0])
	}
}

func (s *sender) full(b *batch) bool {
	return len(b.msgs) >= s.p.cfg.batchMessages || b.body.Size() >= s.p.cfg.batchBytes
}

// resolve returns the route of (kind, subject) from the local cache or the
// resolver. s.mu is held. A route past routeTTL is refreshed in place (its
// round-robin position carries on); when the resolver fails, the route held
// is used until it answers.
func (s *sender) resolve(kind route.Kind, subject string, now time.Time) (*routeEntry, error) {
	key := routeKey{kind, s.cacheKey(subject)}
	e := s.lastRoute
	if e == nil || s.lastKey != key {
		e = s.routes.of(kind)[key.subject]
	}
	if e != nil && now.Sub(e.fetched) < routeTTL {
		s.lastKey, s.lastRoute = key, e
		return e, nil
	}
	ctx, cancel := contextWithTimeout(s.p.cfg.requestTime)
	groups, err := s.p.cfg.resolver.Resolve(ctx, route.Request{Kind: kind, Subject: subject})
	if kind == route.ProduceDelay && s.p.cfg.delayFallback && (errors.Is(err, route.ErrNoGroups) || err == nil && len(groups) == 0) {
		groups, err = s.p.cfg.resolver.Resolve(ctx, route.Request{Kind: route.Produce, Subject: subject})
	}
	cancel()
	if err != nil {
		if e != nil {
			return e, nil // keep using what we had
		}
		return nil, err
	}
	if len(groups) == 0 {
		return nil, fmt.Errorf("%w for %q", route.ErrNoGroups, subject)
	}
	// Subjects mostly share their groups: keep one copy of an answer seen
	// last, so that picking a group reads memory already in the caches.
	if slices.Equal(groups, s.sharedGroups) {
		groups = s.sharedGroups
	} else {
		s.sharedGroups = groups
	}
	if e == nil {
		e = &routeEntry{next: newPosition()}
		s.routes.of(kind)[key.subject] = e
	}
	e.groups, e.fetched = groups, now
	s.lastKey, s.lastRoute = key, e
	return e, nil
}

// flush sends batches that are ready: full ones always, others when idle
// (the queue has nothing more to add; under WithBusyLinger, not while
// busy) or past their linger.
func (s *sender) flush(idle bool) {
	now := s.p.cfg.now()
	s.blocked = false
	for _, b := range s.batches {
		if len(b.msgs) == 0 {
			continue
		}
		ready := s.full(b) || (idle && s.p.cfg.linger == 0 && !s.busy(b, now)) || (s.p.cfg.linger > 0 && now.Sub(b.started) >= s.p.cfg.linger)
		if !ready {
			continue
		}
		if !s.send(b) && s.full(b) {
			s.blocked = true
		}
	}
}

// busy reports whether b, not full, waits for more messages: its group has
// WithBusyLinger's requests in flight and b is younger than its wait.
func (s *sender) busy(b *batch, now time.Time) bool {
	c := &s.p.cfg
	return c.busyLinger > 0 && s.inFlight[b.group.Name] >= c.busyInFlight && now.Sub(b.started) < c.busyLinger
}

// send sends b if its group has an in-flight slot; it reports whether it did.
func (s *sender) send(b *batch) bool {
	g := b.group
	if s.inFlight[g.Name] >= s.p.cfg.maxInFlight {
		if s.full(b) {
			s.blocked = true
		}
		return false
	}
	msgs, span := b.msgs, b.span
	b.msgs, b.span, b.traceProps = nil, nil, nil
	sentAt := s.p.cfg.now()
	results := s.p.results
	err := s.p.transport.Go(g.Addr, protocol.CmdSend, b.body.Bytes(), s.p.cfg.requestTime, func(body []byte, err error) {
		r := &result{group: g, msgs: msgs, body: body, err: err, sentAt: sentAt, counted: true, span: span}
		if err == nil {
			// Answer waiting Send calls now, one hand-off sooner; sendLoop
			// does the rest (accounting, retries, callbacks).
			if st, derr := protocol.DecodeSendResponse(body); derr == nil && len(st) == len(msgs) {
				r.statuses = st
				for i, pd := range msgs {
					if pd.syncCh != nil && st[i].Success() {
						pd.syncCh <- nil
						pd.answered = true
					}
				}
			}
		}
		results <- r
	})
	b.body.Reset(g.Epoch)
	if err != nil {
		s.handle(&result{group: g, msgs: msgs, err: err, sentAt: sentAt, span: span})
		return true
	}
	s.inFlight[g.Name]++
	return true
}

// handle applies a send request's outcome to its messages.
func (s *sender) handle(r *result) {
	now := s.p.cfg.now()
	if r.counted {
		s.inFlight[r.group.Name]--
	}
	statuses := r.statuses
	err := r.err
	if r.span != nil {
		defer func() { endBatchSpan(r.span, r.msgs, statuses, err) }()
	}
	if err == nil && statuses == nil {
		statuses, err = protocol.DecodeSendResponse(r.body)
		if err == nil && len(statuses) != len(r.msgs) {
			err = fmt.Errorf("%w: %d statuses for %d messages", protocol.ErrBadRequest, len(statuses), len(r.msgs))
		}
	}
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) && !pe.Status.Retryable() {
			for _, pd := range r.msgs {
				s.complete(pd, fmt.Errorf("producer: message %s to group %s: %w", pd.id, r.group.Name, err))
			}
			return
		}
		s.mu.Lock()
		backoff := s.sel.failed(r.group.Name, now)
		s.mu.Unlock()
		s.invalidate(r.group, r.msgs, err)
		s.p.lg.Debug("send request failed", zap.String("broker_group", r.group.Name), zap.String("addr", r.group.Addr),
			zap.Int("messages", len(r.msgs)), zap.Duration("avoid", backoff), zap.Error(err))
		for _, pd := range r.msgs {
			pd.avoid = r.group.Name
			s.retry(pd, fmt.Errorf("group %s: %w", r.group.Name, err), now)
		}
		return
	}
	s.mu.Lock()
	s.sel.succeeded(r.group.Name, now.Sub(r.sentAt), now)
	s.mu.Unlock()
	routing := false
	for i, pd := range r.msgs {
		st := statuses[i]
		switch {
		case st.Success():
			s.complete(pd, nil)
		case st.Retryable():
			routing = routing || st == protocol.StatusReadonly || st == protocol.StatusNotRouted || st == protocol.StatusNotMaster ||
				st == protocol.StatusStaleEpoch
			pd.avoid = r.group.Name
			s.retry(pd, protocol.StatusError(st, "group "+r.group.Name), now)
		default:
			s.complete(pd, fmt.Errorf("producer: message %s: %w", pd.id, refusal(st, r.group.Name, pd.raw)))
		}
	}
	if routing {
		s.mu.Lock()
		s.sel.failed(r.group.Name, now)
		s.mu.Unlock()
		s.invalidate(r.group, r.msgs, nil)
	}
}

// cacheKey is the subject's key in the route cache: "" for every subject
// when the resolver's answers do not depend on it (route.SubjectFree), so
// that messages spread over thousands of subjects share one route (and one
// round-robin position) instead of a cold map entry each.
func (s *sender) cacheKey(subject string) string {
	if s.subjectFree {
		return ""
	}
	return subject
}

// invalidate asks the resolver (and the local cache) for fresh routes of the
// subjects in msgs: once per cached route (cacheKey), so a subject-free
// resolver is asked once per kind whatever the number of subjects.
func (s *sender) invalidate(g route.Group, msgs []*pending, _ error) {
	seen := map[routeKey]bool{}
	for _, pd := range msgs {
		key := routeKey{pd.kind, s.cacheKey(pd.subject)}
		if seen[key] {
			continue
		}
		seen[key] = true
		s.invalidateRoute(pd.kind, pd.subject)
	}
}

// invalidateRoute forgets the route of subject for kind, here and in the
// resolver's cache.
func (s *sender) invalidateRoute(kind route.Kind, subject string) {
	key := routeKey{kind, s.cacheKey(subject)}
	s.mu.Lock()
	delete(s.routes.of(kind), key.subject)
	if s.lastKey == key {
		s.lastRoute = nil
	}
	s.mu.Unlock()
	s.p.cfg.resolver.Invalidate(route.Request{Kind: kind, Subject: subject})
}

// retry schedules pd for another try after a back-off, or fails it when its
// deadline has passed.
// maxRetryBackoff caps the wait before a message's next try.
const maxRetryBackoff = time.Second

func (s *sender) retry(pd *pending, err error, now time.Time) {
	pd.tries++
	pd.lastErr = err
	if s.aborted {
		s.complete(pd, fmt.Errorf("%w: message %s not stored: %w", ErrClosed, pd.id, err))
		return
	}
	if !now.Before(pd.deadline) {
		s.complete(pd, fmt.Errorf("%w: message %s after %d tries: %w", ErrSendTimeout, pd.id, pd.tries, err))
		return
	}
	var backoff time.Duration
	if pd.tries > 1 {
		// 50 ms … 1 s, jittered: a failover takes seconds, and a message
		// should land within a second of its group's new master.
		backoff = jitter.Nth(50*time.Millisecond, maxRetryBackoff, pd.tries-1)
	}
	pd.retryAt = now.Add(backoff)
	if pd.retryAt.After(pd.deadline) {
		pd.retryAt = pd.deadline
	}
	s.retries = append(s.retries, pd)
}

// dueRetries places the retries whose time has come.
func (s *sender) dueRetries() {
	if len(s.retries) == 0 {
		return
	}
	now := s.p.cfg.now()
	s.now = now
	kept := s.retries[:0]
	var due []*pending
	for _, pd := range s.retries {
		if now.Before(pd.retryAt) {
			kept = append(kept, pd)
		} else {
			due = append(due, pd)
		}
	}
	for i := len(kept); i < len(s.retries); i++ {
		s.retries[i] = nil
	}
	s.retries = kept
	for _, pd := range due {
		s.place(pd)
	}
}

func (s *sender) complete(pd *pending, err error) {
	s.outstanding--
	if pd.syncCh != nil {
		// Send waits on a buffered channel: answer it from here, one hand-off
		// sooner than through completeLoop (unless the transport callback
		// already did).
		if !pd.answered {
			pd.syncCh <- err
		}
		s.p.slab.put(pd)
		return
	}
	s.completions = append(s.completions, completion{pd, err})
}

// publish hands the completions gathered this turn to completeLoop.
func (s *sender) publish() {
	if len(s.completions) == 0 {
		return
	}
	s.p.done <- s.completions
	s.completions = nil
	select {
	case s.completions = <-s.p.spare:
	default:
	}
}

// resetTimer arms the timer for the next retry or linger deadline (the
// busy linger's too).
func (s *sender) resetTimer() {
	var next time.Time
	for _, pd := range s.retries {
		if next.IsZero() || pd.retryAt.Before(next) {
			next = pd.retryAt
		}
	}
	wait := s.p.cfg.linger
	if wait == 0 {
		wait = s.p.cfg.busyLinger
	}
	if wait > 0 {
		for _, b := range s.batches {
			if len(b.msgs) > 0 {
				if d := b.started.Add(wait); next.IsZero() || d.Before(next) {
					next = d
				}
			}
		}
	}
	if !s.timer.Stop() {
		select {
		case <-s.timer.C:
		default:
		}
	}
	if next.IsZero() {
		return
	}
	d := next.Sub(s.p.cfg.now())
	if d < time.Millisecond {
		d = time.Millisecond
	}
	s.timer.Reset(d)
}

// abortAll fails every message the producer holds that is not in flight
// with ErrClosed; in-flight requests finish (the transport times them out)
// and their failures are not retried.
func (s *sender) abortAll() {
	s.aborted = true
	fail := func(pd *pending) {
		s.complete(pd, fmt.Errorf("%w: message %s not stored", ErrClosed, pd.id))
	}
	for _, pd := range s.retries {
		fail(pd)
	}
	s.retries = nil
	for _, b := range s.batches {
		for _, pd := range b.msgs {
			fail(pd)
		}
		if b.span != nil {
			endBatchSpan(b.span, b.msgs, nil, ErrClosed)
		}
		b.msgs, b.span, b.traceProps = nil, nil, nil
	}
	for ; s.next < len(s.taken); s.next++ {
		fail(s.taken[s.next]) // already counted in outstanding
		s.taken[s.next] = nil
	}
	for {
		s.taken = s.p.inbox.take(s.taken[:0], maxDrain)
		s.next = len(s.taken)
		if len(s.taken) == 0 {
			break
		}
		for i, pd := range s.taken {
			s.outstanding++
			fail(pd)
			s.taken[i] = nil
		}
	}
	s.drained = true
	s.publish()
}

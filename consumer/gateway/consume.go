package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// A consumer session is one (consumer id, subject, group) of one identity:
// a consumer.Puller and the messages it handed out that are not acked or
// nacked yet, by message id. It lives while the consumer id pulls, acks or
// nacks; ConsumerTimeout after the last of them it closes, and the broker
// gets its un-acked messages back for the rest of the group at once.

// consumerClient is one consumer id of one identity: a consumer.Consumer
// (the broker sees the consumer id) and its sessions.
type consumerClient struct {
	id       string
	consumer *consumer.Consumer

	mu       sync.Mutex
	sessions map[sessionKey]*session
}

type sessionKey struct{ subject, group string }

type session struct {
	key    sessionKey
	puller *consumer.Puller

	lastUsed atomic.Int64 // unix nanoseconds of the last pull, ack or nack
	active   atomic.Int32 // requests using the session now (long polls, streams)

	mu   sync.Mutex
	held map[string][]*consumer.Message // handed out, not acked or nacked
}

func (ss *session) touch() { ss.lastUsed.Store(time.Now().UnixNano()) }

// hold records msgs as handed out.
func (ss *session) hold(msgs []*consumer.Message) {
	ss.mu.Lock()
	for _, m := range msgs {
		ss.held[m.ID] = append(ss.held[m.ID], m)
	}
	ss.mu.Unlock()
}

// take removes the held messages with id (every delivery of it).
func (ss *session) take(id string) []*consumer.Message {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ms := ss.held[id]
	delete(ss.held, id)
	return ms
}

// pullParams are a pull's or a stream's query parameters.
type pullParams struct {
	consumerID string
	max        int
	wait       time.Duration
	encoding   string
	earliest   bool
}

func (s *Server) pullParams(r *http.Request, stream bool) (pullParams, *Problem) {
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "consumer", "max", "wait", "encoding", "start":
		default:
			return pullParams{}, badRequest(fmt.Sprintf("unknown query parameter %q", k))
		}
	}
	pp := pullParams{consumerID: q.Get("consumer"), max: 10, wait: s.opts.DefaultWait, encoding: q.Get("encoding")}
	if stream {
		pp.max = min(100, s.opts.MaxPull)
	}
	if pp.consumerID == "" {
		return pp, badRequest("consumer: the consumer id is required (stable across the consumer's pulls and acks)")
	}
	if v := q.Get("max"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > s.opts.MaxPull {
			return pp, badRequest(fmt.Sprintf("max %q: want 1..%d", v, s.opts.MaxPull))
		}
		pp.max = n
	}
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return pp, badRequest(fmt.Sprintf("wait %q: want a duration such as 500ms or 10s", v))
		}
		if d > s.opts.MaxWait {
			return pp, badRequest(fmt.Sprintf("wait %v is past the gateway's limit of %v", d, s.opts.MaxWait))
		}
		pp.wait = d
	}
	switch pp.encoding {
	case "", encodingUTF8, encodingBase64:
	default:
		return pp, badRequest(fmt.Sprintf("encoding %q: want utf8 or base64", pp.encoding))
	}
	switch v := q.Get("start"); v {
	case "", "latest":
	case "earliest":
		pp.earliest = true
	default:
		return pp, badRequest(fmt.Sprintf("start %q: want earliest or latest", v))
	}
	return pp, nil
}

// session finds or opens the session (consumer id, subject, group) of id.
// The caller holds it active and releases it with done.
func (s *Server) session(id *identity, r *http.Request, pp pullParams) (*session, *Problem) {
	subject, group := r.PathValue("subject"), r.PathValue("group")
	if err := protocol.DefaultLimits.CheckSubject(subject); err != nil {
		return nil, errorProblem(err)
	}
	if err := protocol.DefaultLimits.CheckGroup(group); err != nil {
		return nil, errorProblem(err)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	cc := id.consumers[pp.consumerID]
	if cc == nil {
		c, err := consumer.New(s.consumerOptions(id, pp.consumerID)...)
		if err != nil {
			return nil, newProblem(http.StatusBadRequest, protocol.StatusInvalid, err.Error())
		}
		cc = &consumerClient{id: pp.consumerID, consumer: c, sessions: map[sessionKey]*session{}}
		id.consumers[pp.consumerID] = cc
	}
	key := sessionKey{subject, group}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	ss := cc.sessions[key]
	if ss == nil {
		opts := []consumer.SubscribeOption{consumer.PullBatch(s.opts.PullBatch), consumer.MaxUnacked(s.opts.MaxUnacked)}
		if pp.earliest {
			opts = append(opts, consumer.StartEarliest())
		}
		p, err := cc.consumer.Puller(subject, group, opts...)
		if err != nil {
			return nil, errorProblem(err)
		}
		ss = &session{key: key, puller: p, held: map[string][]*consumer.Message{}}
		cc.sessions[key] = ss
	}
	ss.active.Add(1)
	ss.touch()
	return ss, nil
}

func (ss *session) done() {
	ss.touch()
	ss.active.Add(-1)
}

// findSession returns an open session, or nil.
func (id *identity) findSession(consumerID, subject, group string) *session {
	id.mu.Lock()
	defer id.mu.Unlock()
	cc := id.consumers[consumerID]
	if cc == nil {
		return nil
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.sessions[sessionKey{subject, group}]
}

// waitContext ends after wait, when the request ends or when the gateway
// closes.
func (s *Server) waitContext(r *http.Request, wait time.Duration) (context.Context, context.CancelFunc) {
	// A zero wait still gives messages already buffered a moment to be taken.
	ctx, cancel := context.WithTimeout(r.Context(), max(wait, 10*time.Millisecond))
	stop := context.AfterFunc(s.life, cancel)
	return ctx, func() { stop(); cancel() }
}

// pull serves GET /v1/subjects/{subject}/groups/{group}/messages: a long
// poll for up to max messages, answered as soon as one is there or when
// wait ends (with none).
func (s *Server) pull(w http.ResponseWriter, r *http.Request, id *identity) *Problem {
	pp, p := s.pullParams(r, false)
	if p != nil {
		return p
	}
	ss, p := s.session(id, r, pp)
	if p != nil {
		return p
	}
	defer ss.done()
	s.mets.polls.Inc()
	defer s.mets.polls.Dec()
	ctx, cancel := s.waitContext(r, pp.wait)
	defer cancel()
	msgs, err := ss.puller.Pull(ctx, pp.max)
	if err != nil && ctx.Err() == nil {
		return errorProblem(err)
	}
	ss.hold(msgs)
	s.mets.pulled.Add(float64(len(msgs)))
	b := make([]byte, 0, 64+len(msgs)*512)
	b = append(b, `{"messages":[`...)
	for i, m := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendPulled(b, m, pp.encoding)
	}
	b = append(b, "]}\n"...)
	writeBody(w, http.StatusOK, b)
	return nil
}

// stream serves GET /v1/subjects/{subject}/groups/{group}/stream: server-
// sent events, one "message" event per message (data: the message as in a
// pull), acked and nacked like pulled ones; a comment line every wait
// while there is nothing to send.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, id *identity) *Problem {
	pp, p := s.pullParams(r, true)
	if p != nil {
		return p
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		return newProblem(http.StatusInternalServerError, protocol.StatusInternal, "this connection cannot stream")
	}
	ss, p := s.session(id, r, pp)
	if p != nil {
		return p
	}
	defer ss.done()
	s.mets.polls.Inc()
	defer s.mets.polls.Dec()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	keepAlive := max(pp.wait, time.Second)
	for r.Context().Err() == nil && s.life.Err() == nil {
		ctx, cancel := s.waitContext(r, keepAlive)
		msgs, err := ss.puller.Pull(ctx, pp.max)
		cancel()
		ss.touch()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil {
					return nil
				}
				fl.Flush()
				continue
			}
			return nil // the client left, the gateway closes, or the session closed
		}
		ss.hold(msgs)
		s.mets.pulled.Add(float64(len(msgs)))
		var b []byte
		for _, m := range msgs {
			b = append(b, "id: "...)
			b = append(b, m.ID...)
			b = append(b, "\nevent: message\ndata: "...)
			b = appendPulled(b, m, pp.encoding)
			b = append(b, "\n\n"...)
		}
		if _, err := w.Write(b); err != nil {
			return nil // held messages go back with the session
		}
		fl.Flush()
	}
	return nil
}

// ack serves POST …/ack.
func (s *Server) ack(w http.ResponseWriter, r *http.Request, id *identity) *Problem {
	return s.finish(w, r, id, false)
}

// nack serves POST …/nack.
func (s *Server) nack(w http.ResponseWriter, r *http.Request, id *identity) *Problem {
	return s.finish(w, r, id, true)
}

// errNackedByClient is the cause a nack gives the consumer library.
var errNackedByClient = errors.New("gateway: nacked by the HTTP consumer")

func (s *Server) finish(w http.ResponseWriter, r *http.Request, id *identity, nack bool) *Problem {
	var req AckRequest
	if p := decodeJSON(w, r, s.opts.MaxBodyBytes, &req); p != nil {
		return p
	}
	switch {
	case req.Consumer == "":
		return badRequest("consumer: the consumer id is required")
	case len(req.IDs) == 0:
		return badRequest("ids: at least one message id")
	case !nack && req.RetryAfter != "":
		return badRequest("retryAfter is for nack only")
	}
	cause := errNackedByClient
	if req.RetryAfter != "" {
		d, err := time.ParseDuration(req.RetryAfter)
		if err != nil || d < 0 {
			return badRequest(fmt.Sprintf("retryAfter %q: want a duration such as 10s", req.RetryAfter))
		}
		cause = consumer.RetryAfter(d, errNackedByClient)
	}
	subject, group := r.PathValue("subject"), r.PathValue("group")
	ss := id.findSession(req.Consumer, subject, group)
	if ss == nil {
		p := newProblem(http.StatusNotFound, protocol.StatusNotFound, fmt.Sprintf(
			"consumer %q has no session on %s/%s: it never pulled here, or its messages went back to the group after %v without a pull or ack",
			req.Consumer, subject, group, s.opts.ConsumerTimeout))
		p.Unknown = req.IDs
		return p
	}
	ss.touch()
	done := 0
	var unknown []string
	for _, mid := range req.IDs {
		ms := ss.take(mid)
		if len(ms) == 0 {
			unknown = append(unknown, mid)
			continue
		}
		for _, m := range ms {
			if nack {
				m.Nack(cause)
			} else {
				m.Ack()
			}
		}
		done++
	}
	if nack {
		s.mets.nacked.Add(float64(done))
	} else {
		s.mets.acked.Add(float64(done))
	}
	if len(unknown) > 0 {
		p := newProblem(http.StatusNotFound, protocol.StatusNotFound, fmt.Sprintf(
			"%d of %d ids are not held by consumer %q on %s/%s (never pulled, already acked or nacked, or handed back); the other %d were done",
			len(unknown), len(req.IDs), req.Consumer, subject, group, done))
		p.Unknown = unknown
		return p
	}
	// {"done":n}, as writeJSON would encode AckResponse.
	writeBody(w, http.StatusOK, append(strconv.AppendInt([]byte(`{"done":`), int64(done), 10), "}\n"...))
	return nil
}

// reap closes the sessions of id idle past the consumer timeout, and its
// consumers left without sessions.
func (s *Server) reap(id *identity, now time.Time) {
	limit := now.Add(-s.opts.ConsumerTimeout).UnixNano()
	var idle []*session
	var empty []*consumerClient
	id.mu.Lock()
	for cid, cc := range id.consumers {
		cc.mu.Lock()
		for k, ss := range cc.sessions {
			if ss.active.Load() == 0 && ss.lastUsed.Load() < limit {
				delete(cc.sessions, k)
				idle = append(idle, ss)
			}
		}
		if len(cc.sessions) == 0 {
			delete(id.consumers, cid)
			empty = append(empty, cc)
		}
		cc.mu.Unlock()
	}
	id.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, ss := range idle {
		if err := ss.puller.Close(ctx); err != nil {
			s.lg.Warn("closing an idle consumer session", zap.String("subject", ss.key.subject),
				zap.String("group", ss.key.group), zap.Error(err))
		}
	}
	for _, cc := range empty {
		if err := cc.close(ctx); err != nil {
			s.lg.Warn("closing an idle consumer", zap.String("consumer", cc.id), zap.Error(err))
		}
	}
}

// close hands the sessions' un-acked messages back and closes the consumer.
func (cc *consumerClient) close(ctx context.Context) error {
	cc.mu.Lock()
	ss := cc.sessions
	cc.sessions = map[sessionKey]*session{}
	cc.mu.Unlock()
	var errs []error
	for _, s := range ss {
		errs = append(errs, s.puller.Close(ctx))
	}
	errs = append(errs, cc.consumer.Close(ctx))
	return errors.Join(errs...)
}

// sessionCount counts open sessions (for the metrics).
func (s *Server) sessionCount() int {
	s.mu.Lock()
	ids := make([]*identity, 0, len(s.identities))
	for _, id := range s.identities {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	n := 0
	for _, id := range ids {
		id.mu.Lock()
		for _, cc := range id.consumers {
			cc.mu.Lock()
			n += len(cc.sessions)
			cc.mu.Unlock()
		}
		id.mu.Unlock()
	}
	return n
}

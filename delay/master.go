package delay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/delay/store"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/producer"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// master is the master role: the store, the forwarder that sends due
// messages to realtime brokers, and the replication source its slave
// copies from.
type master struct {
	s       *Server
	lg      *zap.Logger
	store   *store.Store
	forward *producer.Producer
	src     *source
	marks   chan store.Ref // forwarded and acked: to markLoop
	nexts   *nextQueue     // templates of the next occurrences: to recurLoop
	built   *occurrences   // occurrences built ahead by recurLoop

	epoch      atomic.Uint64 // the group's epoch this master serves in (0: none yet)
	forwarding atomic.Int64  // forwards handed to the producer, not answered yet
	closing    atomic.Bool

	started     bool
	stopForward chan struct{}
	forwardDone chan struct{}
	marksDone   chan struct{}
	recurDone   chan struct{}
	retries     sync.WaitGroup // retry timers and the next templates' appends
}

// A burst of due messages (a second's occurrences of many schedules fall
// due in the same millisecond) reaches the forwarding producer one message
// at a time, a little slower than it batches them: without a wait it sent
// a request each time its queue was momentarily empty (10,000 occurrences
// went out as ~250 requests, most of 1–16 messages, each a parse, an append
// and an answer in the realtime broker). With forwardBusyInFlight requests
// unanswered, a batch waits up to forwardBusyLinger to fill.
const (
	forwardBusyInFlight = 2
	forwardBusyLinger   = time.Millisecond
)

// openMaster opens (and recovers) the store in the data directory; a
// slave's copy there becomes a master's store (store.Open promotes it).
func openMaster(s *Server) (*master, error) {
	o := s.opts
	sopts := store.DefaultOptions()
	sopts.Flush = store.FlushMode(o.Flush)
	sopts.FlushInterval = o.FlushInterval
	sopts.Window = o.Window
	sopts.Horizon = o.Horizon
	sopts.Keep = o.Keep
	sopts.Limits = s.limits
	sopts.CheckMessage = func(v *protocol.View) error { _, _, err := ParseCron(v); return err }
	st, err := store.Open(o.DataDir, sopts, s.clk, s.lg)
	if err != nil {
		return nil, fmt.Errorf("delay: open store: %w", err)
	}
	popts := []producer.Option{producer.WithResolver(s.resolver), producer.WithLogger(s.lg), producer.WithLimits(s.limits),
		producer.WithMaxInFlight(o.ForwardInFlight), producer.WithSendTimeout(time.Hour), producer.WithQueueSize(65536),
		producer.WithBusyLinger(forwardBusyInFlight, forwardBusyLinger)}
	if s.kit.ClientTLS != nil {
		popts = append(popts, producer.WithTLS(s.kit.ClientTLS)) // realtime brokers verified by the CA, shown our certificate
	}
	if s.kit.Credentials != nil {
		popts = append(popts, producer.WithCredentials(*s.kit.Credentials))
	}
	fwd, err := producer.New(popts...)
	if err != nil {
		st.Close()
		return nil, err
	}
	m := &master{s: s, lg: s.lg, store: st, forward: fwd, marks: make(chan store.Ref, 65536),
		stopForward: make(chan struct{}), forwardDone: make(chan struct{}), marksDone: make(chan struct{}), recurDone: make(chan struct{}),
		nexts: newNextQueue(), built: newOccurrences()}
	m.src = newSource(m)
	return m, nil
}

func (m *master) start() {
	m.started = true
	go m.forwardLoop()
	go m.markLoop()
	go m.recurLoop()
	m.src.start()
}

// serveSend stores delayed messages; each gets its own status once it is
// durable (and with WaitSlave on the slave), or why it was refused:
// invalid, too large, beyond the horizon.
func (m *master) serveSend(r *netserver.Request) {
	if !m.s.gate.Open() {
		r.ReplyError(m.s.gate.Err())
		return
	}
	if err := m.src.admit(); err != nil {
		r.ReplyError(err)
		return
	}
	req, err := protocol.DecodeSendRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if mine := m.epoch.Load(); mine != 0 && req.Epoch > mine {
		// The producer learnt of a newer election: this master was deposed.
		r.ReplyError(protocol.Errorf(protocol.StatusNotMaster, fmt.Sprintf(
			"delay group %s: the send names epoch %d, this master serves %d", m.s.opts.Group, req.Epoch, mine)))
		return
	}
	metrics := m.s.metrics
	metrics.received.Add(float64(len(req.Messages)))
	total := len(req.Messages)
	msgs, index := publishable(r, req.Messages)
	if len(msgs) == 0 {
		statuses := make([]protocol.Status, total)
		for i := range statuses {
			statuses[i] = protocol.StatusForbidden
		}
		r.Reply(protocol.StatusOK, protocol.AppendSendResponse(nil, statuses))
		return
	}
	arrived := time.Now()
	m.store.Append(msgs, func(results []store.Result) {
		if m.s.opts.TracerProvider != nil {
			m.traceScheduled(msgs, results, arrived)
		}
		statuses := make([]protocol.Status, total)
		if index != nil {
			for i := range statuses {
				statuses[i] = protocol.StatusForbidden
			}
		}
		stored := false
		for j, res := range results {
			i := j
			if index != nil {
				i = index[j]
				statuses[i] = protocol.StatusOK
			}
			if res.Err != nil {
				st := protocol.StatusOf(res.Err)
				if st == protocol.StatusInternal {
					st = protocol.StatusStoreError
				}
				statuses[i] = st
				metrics.rejected.WithLabelValues(st.String()).Inc()
				continue
			}
			stored = true
		}
		if !m.s.opts.WaitSlave && !m.s.gate.Open() {
			// Written under a lease (async mode) that ran out meanwhile.
			r.ReplyError(m.s.gate.Err())
			return
		}
		if !stored || !m.src.wait.Load() {
			r.Reply(protocol.StatusOK, protocol.AppendSendResponse(nil, statuses))
			return
		}
		// The messages lie below the log's end now; the slave holds them
		// once its copy covers a manifest replayed that far.
		m.src.await(m.store.LogEnd(), func(err error) {
			if err != nil {
				r.ReplyError(err)
				return
			}
			r.Reply(protocol.StatusOK, protocol.AppendSendResponse(nil, statuses))
		})
	})
}

// forwardLoop sends every due message to a realtime group of its subject.
// The producer retries each until a broker stores it (or answers that it
// already has it: the message keeps its id, so re-forwards are dropped).
// While the master's gate is closed (fenced, deposed, handing over) it takes
// nothing from the store: messages wait in the wheel (their slave may be
// forwarding them by now).
func (m *master) forwardLoop() {
	defer close(m.forwardDone)
	due := m.store.Due()
	fencedWait := time.NewTicker(20 * time.Millisecond)
	defer fencedWait.Stop()
	for {
		if !m.s.gate.Open() {
			select {
			case <-m.stopForward:
				return
			case <-fencedWait.C:
			}
			continue
		}
		select {
		case <-m.stopForward:
			return
		case <-fencedWait.C:
		case batch, ok := <-due:
			if !ok {
				return
			}
			now := m.s.clk.Now()
			for i, d := range batch {
				if !m.s.gate.Open() {
					// Fenced mid-batch: the rest goes back to the wheel.
					refs := make([]store.Ref, 0, len(batch)-i)
					for _, r := range batch[i:] {
						refs = append(refs, r.Ref)
					}
					m.store.Postpone(refs, now)
					break
				}
				if d.DueMillis > 0 {
					m.s.metrics.fireLateness.Observe(float64(now.UnixMilli()-d.DueMillis) / 1000)
				}
				kind, v := classify(d.Message, now.UnixMilli())
				switch kind {
				case dueExpired:
					m.s.metrics.expired.Inc()
					m.marks <- d.Ref
				case dueTemplate:
					m.recur(d, &v, now)
				default:
					m.send(d, &v)
				}
			}
		}
	}
}

// send forwards a due message, by its subject and id when its view v
// parsed (the store checked the bytes when they arrived and read them back
// whole: the producer takes them as they are), else through SendEncoded's
// checks (an unparsable stored message cannot happen).
func (m *master) send(d store.Due, v *protocol.View) {
	var subject, id string
	if v.Raw != nil {
		subject, id = string(v.Subject), string(v.ID)
	}
	m.sendAs(d, subject, id)
}

func (m *master) sendAs(d store.Due, subject, id string) {
	metrics := m.s.metrics
	var span trace.Span
	if m.s.opts.TracerProvider != nil {
		span = m.traceForward(d)
	}
	cb := func(err error) {
		m.forwarding.Add(-1)
		if span != nil {
			endSpan(span, err)
		}
		if err == nil {
			metrics.forwarded.Inc()
			if d.DueMillis > 0 {
				metrics.lateness.Observe(float64(m.s.clk.Now().UnixMilli()-d.DueMillis) / 1000)
			}
			m.marks <- d.Ref
			return
		}
		// Not delivered within the producer's send timeout (an hour of
		// retries): keep trying, unless the master is closing (the message
		// stays unmarked and is forwarded again after a restart).
		metrics.forwardErrors.Inc()
		m.lg.Warn("forward failed, retrying", zap.Stringer("ref", d.Ref), zap.Error(err))
		if !m.closing.Load() {
			m.retries.Add(1)
			time.AfterFunc(time.Second, func() { defer m.retries.Done(); m.sendAs(d, subject, id) })
		}
	}
	var err error
	m.forwarding.Add(1)
	if id != "" {
		err = m.forward.SendChecked(d.Message, subject, id, cb)
	} else {
		err = m.forward.SendEncoded(d.Message, cb)
	}
	if err != nil {
		m.forwarding.Add(-1)
	}
	if err != nil && !errors.Is(err, producer.ErrClosed) {
		// An invalid stored message cannot happen (the store checked it on
		// the way in and on read-back): log it and mark it so it does not
		// come back on every restart.
		m.lg.Error("cannot forward a stored message; dropping it", zap.Stringer("ref", d.Ref), zap.Error(err))
		m.marks <- d.Ref
	}
}

// markLoop records forwarded messages in the dispatch logs, in batches.
func (m *master) markLoop() {
	defer close(m.marksDone)
	buf := make([]store.Ref, 0, 4096)
	flush := func() {
		if len(buf) == 0 {
			return
		}
		if err := m.store.MarkDispatched(buf); err != nil {
			m.lg.Error("cannot record dispatched messages; they will be forwarded again after a restart", zap.Error(err))
		}
		buf = buf[:0]
	}
	for ref := range m.marks {
		buf = append(buf, ref)
		for drained := false; !drained && len(buf) < cap(buf); {
			select {
			case r, ok := <-m.marks:
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

// close stops forwarding, lets forwards in flight finish (until ctx ends),
// records them, stops the replication source and closes the store.
func (m *master) close(ctx context.Context) error {
	m.closing.Store(true)
	var errs []error
	close(m.stopForward)
	if m.started {
		<-m.forwardDone
	}
	if err := m.forward.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("delay: forwards in flight: %w", err))
	}
	m.nexts.close()
	if m.started {
		<-m.recurDone
	}
	m.retries.Wait()
	close(m.marks)
	if m.started {
		<-m.marksDone
	}
	m.src.close()
	if err := m.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("delay: close store: %w", err))
	}
	return errors.Join(errs...)
}

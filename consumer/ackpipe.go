package consumer

import (
	"errors"
	"sync"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// maxAcksInFlight bounds an AckEach pipe's window whatever MaxUnacked is:
// the broker answers StatusBusy past 4,096 requests in flight on one
// connection (netserver.DefaultMaxInFlight), which the pulls share.
const maxAcksInFlight = 1024

// maxAckList is the most acks one request carries (protocol.AckList), and
// kickAt how many acks ready to go make ackLoop send them while others are
// in flight (with fewer it leaves them to the next answer's callback).
const (
	maxAckList = 256
	kickAt     = 64
)

// Ack states of a pull seq in an ackPipe's ring.
const (
	ackNone     uint8 = iota // not sent
	ackInFlight              // sent, not answered
	ackOK                    // answered OK
	ackFailed                // failed: sent again after the back-off
)

// ackPipe sends a puller's per-message acks (AckEach): each pull seq is
// acked on its own, named alone, once its handler returned, in pull-seq
// order, up to window of them in flight. Acks that are ready together
// travel in one request that lists each pull seq (protocol.AckList, up to
// maxAckList; never a range), as bench_reader's FINs share a write; to a
// broker that predates lists (it answers StatusBadRequest) they go one
// request each. The broker applies one consumer's acks in the order they
// arrive (realtime ackorder.go), so pipelined acks never look like lost
// ones. A message counts as finished once its ack was answered OK.
//
// Who sends: when nothing is in flight, or kickAt acks are ready, ackLoop
// sends (kick); otherwise the answers' callbacks send what became ready.
// The callbacks run on the connection's reader, corked, so the requests
// they send leave together in one write per batch of answers. One sender
// at a time (pumping) keeps the order on the wire.
//
// A failed ack (or one Go refused) is sent again, before new ones, after
// a back-off (ackBackoff); the acks after it may have been applied, and the
// broker then took the failed one's message as a lost ack (it is retried):
// at least once, as with range acks. While stopping (final) failed acks are
// not sent again: the broker re-delivers them.
type ackPipe struct {
	p      *puller
	window uint64
	ring   []uint8 // state of pull seq s at ring[s&mask], for next ≤ s < sent
	mask   uint64
	idle   chan struct{} // signalled when the last ack in flight is answered

	mu       sync.Mutex
	started  bool
	next     uint64 // lowest pull seq not answered OK
	sent     uint64 // lowest pull seq never sent
	end      uint64 // finished pull seqs are below end (ackLoop's prefix)
	inflight int
	failed   int // seqs in state ackFailed
	failures int // failed acks in a row
	retryAt  time.Time
	final    bool     // stopping: no resends
	pumping  bool     // someone is sending (see pump)
	single   bool     // AckEachSingly, or the broker refused a list: one request per ack
	picked   []uint64 // the pull seqs pump is sending (pump only)
	body     []byte
}

func newAckPipe(p *puller) *ackPipe {
	window := uint64(min(p.s.cfg.maxUnacked, maxAcksInFlight))
	size := uint64(1)
	for size < window {
		size <<= 1
	}
	return &ackPipe{p: p, window: window, ring: make([]uint8, size), mask: size - 1, idle: make(chan struct{}, 1),
		single: p.s.cfg.ackSingly}
}

// offer hands the pipe the finished prefix: pull seqs first… end-1 (first
// is where acks start, taken on the first call). It sends the first ack
// itself only when nothing is in flight (see ackPipe).
func (a *ackPipe) offer(first, end uint64) {
	a.mu.Lock()
	if !a.started {
		a.started, a.next, a.sent = true, first, first
	}
	a.end = end
	kick := a.inflight == 0 || !a.single && a.end-a.sent >= kickAt
	a.mu.Unlock()
	if kick {
		a.pump(1)
	}
}

// backoff returns how long a failed ack's back-off still runs (0: none).
func (a *ackPipe) backoff() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failed == 0 {
		return 0
	}
	return max(0, time.Until(a.retryAt))
}

// pickLocked chooses the next pull seq to send: a failed one (once the
// back-off is over, and not while stopping), else the next new one within
// the window. ok false: nothing to send now.
func (a *ackPipe) pickLocked() (seq uint64, ok bool) {
	if a.failed > 0 {
		if a.final || time.Now().Before(a.retryAt) {
			return 0, false // new acks wait too: the broker is likely down
		}
		for s := a.next; s < a.sent; s++ {
			if a.ring[s&a.mask] == ackFailed {
				a.ring[s&a.mask] = ackInFlight
				a.failed--
				return s, true
			}
		}
	}
	if a.sent < a.end && a.sent-a.next < a.window {
		s := a.sent
		a.sent++
		a.ring[s&a.mask] = ackInFlight
		return s, true
	}
	return 0, false
}

// pump sends up to limit requests (0: as many as it may), each with the
// acks ready (up to maxAckList), unless another goroutine is sending,
// which then also sends what this one would have.
func (a *ackPipe) pump(limit int) {
	s := a.p.s
	a.mu.Lock()
	if a.pumping {
		a.mu.Unlock()
		return
	}
	a.pumping = true
	for n := 0; limit == 0 || n < limit; n++ {
		most := maxAckList
		if a.single {
			most = 1
		}
		seqs := a.picked[:0]
		for len(seqs) < most {
			seq, ok := a.pickLocked()
			if !ok {
				break
			}
			seqs = append(seqs, seq)
		}
		a.picked = seqs
		if len(seqs) == 0 {
			break
		}
		a.inflight += len(seqs)
		a.mu.Unlock()
		req := protocol.AckRequest{Subject: a.p.subject, Group: s.group, ConsumerID: s.c.id, First: seqs[0], Last: seqs[0]}
		var done func([]byte, error)
		if len(seqs) == 1 {
			seq := seqs[0]
			done = func(_ []byte, err error) { a.answered([]uint64{seq}, err) }
		} else {
			list := append([]uint64(nil), seqs...) // the callback's own
			req.Flags, req.Seqs = protocol.AckList, list
			done = func(_ []byte, err error) { a.answered(list, err) }
		}
		if s.cfg.broadcast {
			req.Flags |= protocol.AckBroadcast
		}
		a.body = protocol.AppendAckRequest(a.body[:0], &req)
		err := s.c.transport.Go(a.p.currentGroup().Addr, protocol.CmdAck, a.body, 5*time.Second, done)
		a.mu.Lock()
		if err != nil {
			a.failLocked(a.picked, err)
			a.inflight -= len(a.picked)
		}
	}
	a.pumping = false
	idle := a.inflight == 0
	a.mu.Unlock()
	if idle {
		a.signalIdle()
	}
}

// answered records the answer to a request acking seqs and sends what may
// follow (on the connection's reader: see ackPipe).
func (a *ackPipe) answered(seqs []uint64, err error) {
	a.mu.Lock()
	a.inflight -= len(seqs)
	if err != nil {
		if len(seqs) > 1 && errors.Is(err, protocol.ErrBadRequest) && !a.single {
			// A broker that predates list acks: one request per ack from
			// now on, these sent again at once.
			a.single = true
			a.p.lg.Info("the broker takes no list acks: one request per ack", zap.Error(err))
			for _, seq := range seqs {
				a.ring[seq&a.mask] = ackFailed
			}
			a.failed += len(seqs)
			a.retryAt = time.Time{}
		} else {
			a.failLocked(seqs, err)
		}
	} else {
		a.failures = 0
		for _, seq := range seqs {
			a.ring[seq&a.mask] = ackOK
		}
		for a.next < a.sent && a.ring[a.next&a.mask] == ackOK {
			a.ring[a.next&a.mask] = ackNone
			a.next++
		}
	}
	idle := a.inflight == 0
	a.mu.Unlock()
	if err == nil {
		p := a.p
		if p.ackSpans != nil {
			for _, seq := range seqs {
				p.ackSpans.acked(seq)
			}
		}
		if p.received.Load()-p.finished.Add(int64(len(seqs))) <= int64(p.s.cfg.maxUnacked-p.refill()) {
			p.signalProgress()
		}
		a.pump(0)
	} else {
		a.p.wakeAcks() // ackLoop arms the back-off timer, or sends again
	}
	if idle {
		a.signalIdle()
	}
}

// failLocked records a failed request acking seqs.
func (a *ackPipe) failLocked(seqs []uint64, err error) {
	for _, seq := range seqs {
		a.ring[seq&a.mask] = ackFailed
	}
	a.failed += len(seqs)
	a.failures++
	a.retryAt = time.Now().Add(ackBackoff(a.failures))
	if a.final {
		a.p.lg.Warn("final acks failed; the broker will re-deliver", zap.Uint64("pull_seq", seqs[0]), zap.Int("acks", len(seqs)), zap.Error(err))
	} else if a.failures == 1 || a.failures%20 == 0 {
		a.p.lg.Debug("ack failed", zap.Int("failures", a.failures), zap.Error(err))
	}
}

func (a *ackPipe) signalIdle() {
	select {
	case a.idle <- struct{}{}:
	default:
	}
}

// drain sends the acks of the finished prefix and waits for their answers
// (stopping: a failed ack is not sent again, and waits at most wait).
func (a *ackPipe) drain(wait time.Duration) {
	a.mu.Lock()
	a.final = true
	a.mu.Unlock()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		a.mu.Lock()
		done := !a.started || a.inflight == 0 && (a.sent == a.end || a.failed > 0)
		kick := a.inflight == 0
		a.mu.Unlock()
		if done {
			return
		}
		if kick {
			a.pump(1)
		}
		select {
		case <-a.idle:
		case <-deadline.C:
			a.p.lg.Warn("final acks not all answered; the broker will re-deliver")
			return
		}
	}
}

package consumer

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// acker is what a puller's ackLoop knows of its acks: which pull seqs are
// finished, which are acked, when the next ack is due, and how the last
// ones went. It acks the longest finished prefix, one ack in flight at a
// time. An ack waits until the prefix holds half of MaxUnacked messages or
// its first message has waited ackDelay: a consumer that finishes messages
// one pull batch at a time otherwise sent an ack per batch, about as many
// ack requests as pulls, each costing it and the broker a round trip. Acks
// do not gate pulling (that is the unfinished count), so waiting costs
// nothing but a later ack. With AckEach an ackPipe acks each message on
// its own and the acker's own requests are heartbeats and the final
// release. Only ackLoop uses an acker.
type acker struct {
	p *puller

	// Pull seqs next … end-1 are finished and not acked; finished holds
	// those finished above end (out of order). started: the first finished
	// seq came (acks start at the first pull seq received).
	next, end  uint64
	finished   map[uint64]struct{}
	started    bool
	ackMin     uint64
	readySince time.Time // when end last moved past next

	heartbeat  *time.Ticker
	delay      *time.Timer
	delayArmed bool
	lastSent   time.Time

	// After a failed ack the next waits out a back-off (ackBackoff): without
	// it every finished message retried at once, and a broker that was
	// restarting saw enough failed dials in a millisecond to open its
	// breaker for the pulls too.
	failures int
	retryAt  time.Time

	spare    []uint64 // finished seqs taken from the puller, reused
	body     []byte   // the ack request, reused
	pipe     *ackPipe // AckEach (see offerEach)
	eachFrom uint64   // AckEach: the first pull seq
}

func newAcker(p *puller) *acker {
	a := &acker{p: p, finished: map[uint64]struct{}{}, ackMin: uint64(p.ackSoon()),
		heartbeat: time.NewTicker(p.s.cfg.heartbeat), delay: time.NewTimer(time.Hour), lastSent: time.Now()}
	a.delay.Stop()
	if p.s.cfg.ackEach {
		a.pipe = newAckPipe(p)
	}
	return a
}

// take absorbs the pull seqs finished since the last take; disarm records
// that the delay timer fired (see puller.takeDone).
func (a *acker) take(disarm bool) {
	a.spare = a.p.takeDone(a.spare, disarm)
	for _, seq := range a.spare {
		a.absorb(seq)
	}
}

// absorb records a finished pull seq, moving end past it and past the
// out-of-order ones it joins.
func (a *acker) absorb(seq uint64) {
	if !a.started {
		// Acks start at the first pull seq received, which is not always
		// the first one finished.
		a.next, a.started = uint64(a.p.firstSeq.Load()), true
		a.end, a.eachFrom = a.next, a.next
	}
	switch {
	case seq < a.end:
		return // already finished
	case seq > a.end:
		a.finished[seq] = struct{}{}
		return
	}
	if a.end == a.next {
		a.readySince = time.Now()
	}
	a.end++
	for len(a.finished) > 0 {
		if _, ok := a.finished[a.end]; !ok {
			break
		}
		delete(a.finished, a.end)
		a.end++
	}
}

// send acks next … end-1 (or, with nothing new, heartbeats once the
// heartbeat interval has passed); final is the last request, which hands
// the un-acked entries back when the subscription releases them.
func (a *acker) send(final bool) {
	p, s := a.p, a.p.s
	var flags uint8
	if s.cfg.broadcast {
		flags |= protocol.AckBroadcast
	}
	if final && p.release.Load() {
		flags |= protocol.AckRelease
	}
	if a.end == a.next && flags&protocol.AckRelease == 0 && time.Since(a.lastSent) < s.cfg.heartbeat {
		return // nothing new and not yet time for a heartbeat
	}
	first, last := a.next, a.end-1
	if a.end == a.next {
		first, last = 1, 0 // heartbeat: an empty range
	}
	req := protocol.AckRequest{Subject: p.subject, Group: s.group, ConsumerID: s.c.id, Flags: flags, First: first, Last: last}
	a.body = protocol.AppendAckRequest(a.body[:0], &req)
	_, err := s.c.transport.CallTimeout(context.Background(), p.currentGroup().Addr, protocol.CmdAck, a.body, 5*time.Second)
	a.lastSent = time.Now()
	if err != nil {
		// Not acked: the range stays for the next ack.
		a.failures++
		a.retryAt = a.lastSent.Add(ackBackoff(a.failures))
		if final {
			p.lg.Warn("final ack failed; the broker will re-deliver", zap.Error(err))
		} else if a.failures == 1 || a.failures%20 == 0 {
			p.lg.Debug("ack failed", zap.Int("failures", a.failures), zap.Error(err))
		}
		return
	}
	a.failures, a.retryAt = 0, time.Time{}
	if a.p.ackSpans != nil && a.end > a.next {
		a.p.ackSpans.ackedBelow(a.end)
	}
	a.next = a.end
}

// armDelay makes sure the delay timer calls again after d.
func (a *acker) armDelay(d time.Duration) {
	if !a.delayArmed {
		a.delay.Reset(d)
		a.delayArmed = true
		a.p.armAck(true)
	}
}

// offerEach hands the AckEach pipe the finished prefix and keeps next at
// end, so the acker's own requests are heartbeats only.
func (a *acker) offerEach() {
	a.next = a.end // the pipe owns the range
	if w := a.pipe.backoff(); w > 0 {
		a.armDelay(w)
		return
	}
	a.pipe.offer(a.eachFrom, a.end)
}

// backingOff reports whether a failed ack's back-off still runs, and then
// makes sure the delay timer calls again when it ends.
func (a *acker) backingOff() bool {
	wait := time.Until(a.retryAt)
	if wait <= 0 {
		return false
	}
	a.armDelay(wait)
	return true
}

// maybeSend acks once the range is full enough or has waited long enough,
// and otherwise makes sure the delay timer will call again.
func (a *acker) maybeSend() {
	if a.pipe != nil {
		if a.started {
			a.offerEach()
		}
		return
	}
	if !a.started || a.end == a.next || a.backingOff() {
		return
	}
	waited := time.Since(a.readySince)
	if a.end-a.next >= a.ackMin || waited >= ackDelay {
		a.send(false)
		return
	}
	a.armDelay(ackDelay - waited)
}

// beat runs on the heartbeat tick: what the AckEach pipe may send, and an
// ack or a heartbeat unless a back-off runs.
func (a *acker) beat() {
	if a.pipe != nil && a.started {
		a.offerEach()
	}
	if a.started && !a.backingOff() {
		a.send(false)
	} else if time.Since(a.lastSent) >= a.p.s.cfg.heartbeat {
		a.lastSent = time.Now()
	}
}

// stop sends what is finished, waits for the AckEach pipe's acks, and
// sends the final request (the release, if any).
func (a *acker) stop() {
	if a.pipe != nil && a.started {
		a.next = a.end
		a.pipe.offer(a.eachFrom, a.end)
		a.pipe.drain(10 * time.Second)
		// Whatever failed is re-delivered: the final request (the
		// release, if any) names no range.
	}
	if a.started || a.p.release.Load() {
		a.send(true)
	}
	if a.p.ackSpans != nil {
		a.p.ackSpans.unacked()
	}
}

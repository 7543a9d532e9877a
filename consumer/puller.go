package consumer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/jitter"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
	"go.uber.org/zap"
)

// puller pulls one subject (the subscribed one or its retry subject) from
// one broker group and acks what its subscription finished there.
type puller struct {
	s       *Subscription
	subject string
	lg      *zap.Logger

	groupMu sync.Mutex
	group   route.Group

	known    int64        // highest pull seq received; pullLoop only
	firstSeq atomic.Int64 // first pull seq received (-1: none yet): where acks start
	received atomic.Int64 // messages handed on
	finished atomic.Int64 // messages finished (acked or abandoned)

	doneMu   sync.Mutex
	doneSeqs []uint64 // finished pull seqs, for ackLoop (guarded by doneMu)
	// ackArmed: ackLoop's delay timer will fire and take doneSeqs, so a
	// finished message need not wake it (guarded by doneMu; see done).
	ackArmed bool
	doneSig  chan struct{} // signals ackLoop that doneSeqs has entries
	progress chan struct{} // done → pullLoop: room for a pull (see refill)

	pullCtx    context.Context
	cancelPull context.CancelFunc
	stopAcks   chan struct{}
	release    atomic.Bool // the final ack hands un-acked entries back
	pullDone   chan struct{}
	ackDone    chan struct{}
	stopOnce   sync.Once

	ackSpans *ackSpans // with a tracer: traced messages' ack spans (tracing.go)
}

// delivery is one pulled message on its way through a handler; the
// Message lives in it, and a pull's deliveries share one allocation (see
// pullBatch). msg is nil for a corrupt message.
type delivery struct {
	p       *puller
	pullSeq uint64
	raw     []byte // the stored bytes: a slice of the pull response, which we own
	msg     *Message
	once    atomic.Bool
	message Message
	// With a tracer: when the pull answered, and the message's trace
	// context (nil: not traced), for its spans (tracing.go).
	pulled time.Time
	traced context.Context
}

func newPuller(s *Subscription, g route.Group, subject string) *puller {
	ctx, cancel := context.WithCancel(context.Background())
	p := &puller{
		s: s, subject: subject, group: g,
		lg:         s.lg.With(zap.String("broker_group", g.Name), zap.String("pull_subject", subject)),
		known:      -1,
		doneSig:    make(chan struct{}, 1),
		progress:   make(chan struct{}, 1),
		pullCtx:    ctx,
		cancelPull: cancel,
		stopAcks:   make(chan struct{}),
		pullDone:   make(chan struct{}),
		ackDone:    make(chan struct{}),
	}
	p.firstSeq.Store(-1)
	if s.c.cfg.tracer != nil {
		p.ackSpans = &ackSpans{}
	}
	return p
}

func (p *puller) currentGroup() route.Group {
	p.groupMu.Lock()
	defer p.groupMu.Unlock()
	return p.group
}

func (p *puller) setGroup(g route.Group) {
	p.groupMu.Lock()
	p.group = g
	p.groupMu.Unlock()
}

func (p *puller) start() {
	go p.pullLoop()
	go p.ackLoop()
}

// stopPulling ends the pull loop (a pull in flight is abandoned).
func (p *puller) stopPulling() {
	p.cancelPull()
	<-p.pullDone
}

// stop ends both loops: the ack loop sends its last ack first (with the
// release flag when release is set).
func (p *puller) stop(release bool) {
	p.stopOnce.Do(func() {
		p.stopPulling()
		p.release.Store(release)
		close(p.stopAcks)
		<-p.ackDone
	})
}

func (p *puller) unfinished() int64 { return p.received.Load() - p.finished.Load() }

// pullAnswer is the outcome of one pull request in flight.
type pullAnswer struct {
	body  []byte
	err   error
	max   int         // how many messages it asked for
	group route.Group // the broker group it went to
}

// pullLoop pulls while its messages' handlers keep up. It keeps up to
// PullDepth pulls in flight while the broker answers full batches (a
// backlog): the next batch is on its way while handlers work through this
// one and the answer is read. Only the pull sent with nothing in flight
// carries an exact KnownPullSeq and may be answered with re-deliveries; the
// others say protocol.PullPipelined. Answers are taken in the order the
// pulls were sent. After a failed pull the answers still in flight are
// dropped (their messages are re-delivered to the next plain pull) and the
// loop goes back to one pull at a time.
func (p *puller) pullLoop() {
	defer close(p.pullDone)
	s := p.s
	cfg := &s.cfg
	flags := uint8(0)
	if cfg.broadcast {
		flags |= protocol.PullBroadcast
	}
	if cfg.earliest {
		flags |= protocol.PullEarliest
	}
	failures := 0
	depth := 1                  // pulls to keep in flight now: cfg.pullDepth after a full answer
	inflight := 0               // pulls sent and not yet taken from answers
	asked := 0                  // messages they asked for
	var order []chan pullAnswer // one per pull in flight, oldest first
	var free []chan pullAnswer  // spare ones
	var body []byte
	var items []protocol.PulledMessage // reused for every pull
	var batch pullBatch
	send := func(max int) {
		f := flags
		if inflight > 0 {
			f |= protocol.PullPipelined
		}
		req := protocol.PullRequest{
			Subject: p.subject, Group: s.group, ConsumerID: s.c.id, Max: uint32(max),
			Timeout: cfg.pullTimeout, Flags: f, KnownPullSeq: p.known, TagMode: cfg.tagMode, Tags: cfg.tags,
		}
		body = protocol.AppendPullRequest(body[:0], &req)
		g := p.currentGroup()
		var ch chan pullAnswer
		if n := len(free); n > 0 {
			ch, free = free[n-1], free[:n-1]
		} else {
			ch = make(chan pullAnswer, 1)
		}
		// Go takes its deadline from the transport's clock: no context and
		// timer per pull.
		err := s.c.transport.Go(g.Addr, protocol.CmdPull, body, cfg.pullTimeout+5*time.Second, func(resp []byte, err error) {
			ch <- pullAnswer{body: resp, err: err, max: max, group: g}
		})
		if err != nil {
			ch <- pullAnswer{err: err, max: max, group: g}
		}
		order = append(order, ch)
		inflight++
		asked += max
	}
	take := func() (pullAnswer, bool) {
		ch := order[0]
		var a pullAnswer
		select {
		case a = <-ch:
		case <-p.pullCtx.Done():
			return a, false
		}
		order = append(order[:0], order[1:]...)
		free = append(free, ch)
		inflight--
		asked -= a.max
		return a, true
	}
	for {
		if p.pullCtx.Err() != nil {
			return
		}
		if inflight == 0 {
			// Flow control: wait while too many messages are unfinished
			// for a pull of refill messages.
			for p.unfinished() > int64(cfg.maxUnacked-p.refill()) {
				select {
				case <-p.pullCtx.Done():
					return
				case <-p.progress:
				}
			}
			if s.offline() {
				// Taken offline by an admin: pull nothing until brought back.
				select {
				case <-p.pullCtx.Done():
					return
				case <-time.After(time.Second):
				}
				continue
			}
		}
		// Taken offline with pulls in flight: take their answers, send no
		// more.
		for inflight < depth && !s.offline() {
			max := min(cfg.batch, cfg.maxUnacked-int(p.unfinished())-asked)
			if max <= 0 || (inflight > 0 && max < cfg.batch) {
				break // pipelined pulls ask for whole batches only
			}
			send(max)
		}
		a, ok := take()
		if !ok {
			return
		}
		err := a.err
		if err == nil {
			items, err = protocol.DecodePullResponseInto(items, a.body)
		}
		if err != nil {
			if p.pullCtx.Err() != nil {
				return
			}
			// Drop the answers in flight: what they hold comes back to the
			// next plain pull, in order.
			for inflight > 0 {
				if _, ok := take(); !ok {
					return
				}
			}
			depth = 1
			failures++
			p.pullFailed(err, failures)
			continue
		}
		failures = 0
		depth = 1
		if len(items) >= a.max {
			depth = cfg.pullDepth // a backlog: keep the next batches coming
		}
		for _, pm := range items {
			if int64(pm.PullSeq) > p.known {
				p.known = int64(pm.PullSeq)
			}
		}
		ok = p.deliver(batch.build(p, items, a.group.Name))
		clear(items) // drop the references to the response body
		if !ok {
			return
		}
	}
}

// pullFailed logs and backs off after a failed pull.
func (p *puller) pullFailed(err error, failures int) {
	var pe *protocol.Error
	if errors.As(err, &pe) && (pe.Status == protocol.StatusNotMaster || pe.Status == protocol.StatusNotRouted) {
		p.s.invalidate()
	}
	backoff := jitter.Nth(50*time.Millisecond, 1600*time.Millisecond, failures) // 50 ms … 1.6 s, jittered
	if failures == 1 || failures%20 == 0 {
		p.lg.Warn("pull failed", zap.Int("failures", failures), zap.Duration("backoff", backoff), zap.Error(err))
	}
	select {
	case <-p.pullCtx.Done():
	case <-time.After(backoff):
	}
}

// deliver hands a pull's messages to the subscription in order, holding
// each until it is due. It returns false when the puller is stopping.
func (p *puller) deliver(ds []delivery) bool {
	if len(ds) == 0 {
		return true
	}
	p.received.Add(int64(len(ds)))
	p.firstSeq.CompareAndSwap(-1, int64(ds[0].pullSeq))
	if p.ackSpans != nil {
		now := time.Now()
		for i := range ds {
			ds[i].pulled = now
		}
	}
	for i := range ds {
		d := &ds[i]
		if d.msg == nil { // corrupt: counted done (see pullBatch.build)
			d.finish(nil)
			continue
		}
		if due := d.msg.DeliverAt; !due.IsZero() {
			if wait := due.Sub(p.s.c.cfg.now()); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-p.pullCtx.Done():
					t.Stop()
					p.abandon(len(ds) - i)
					return false
				}
			}
		}
		// Without a select while the buffer has room: a select per
		// message cost a busy consumer a tenth of its CPU.
		select {
		case p.s.work <- d:
			continue
		default:
		}
		select {
		case p.s.work <- d:
		case <-p.pullCtx.Done():
			p.abandon(len(ds) - i)
			return false
		}
	}
	return true
}

// abandon counts n received messages that will not be handled here; they
// stay un-acked and the broker hands them to the group again.
func (p *puller) abandon(n int) {
	p.finished.Add(int64(n))
}

// finish records a delivery's outcome once.
func (d *delivery) finish(err error) {
	if !d.once.CompareAndSwap(false, true) {
		return
	}
	if d.traced != nil && d.p.ackSpans != nil {
		d.p.ackSpans.start(d, err)
	}
	if err == nil {
		d.p.done(d.pullSeq)
		return
	}
	d.p.s.retry(d, err, func() { d.p.done(d.pullSeq) })
}

// refill is the room, in messages, that a subscription at its MaxUnacked
// bound waits for before it pulls again: a batch, or half the bound if
// that is less. Pulling as soon as one message finished asked for one
// message a round trip: a consumer whose handler takes a millisecond sent
// a pull per message, and was woken for every finished one.
func (p *puller) refill() int {
	return max(1, min(p.s.cfg.batch, p.s.cfg.maxUnacked/2))
}

// done records a finished pull seq for ackLoop. It wakes ackLoop only when
// that has nothing coming (the first seq since it last took them, with no
// delay timer armed) or enough for an ack at once, and wakes pullLoop only
// when there is room for its next pull: each wake-up of another goroutine
// can cost a thread wake-up, and on a virtual machine a hypervisor exit,
// per message.
func (p *puller) done(seq uint64) {
	var unfinished int64
	if p.s.cfg.ackEach {
		unfinished = p.unfinished() // finished once acked (ackLoop's sendEach)
	} else {
		unfinished = p.received.Load() - p.finished.Add(1)
	}
	p.doneMu.Lock()
	p.doneSeqs = append(p.doneSeqs, seq)
	n, armed := len(p.doneSeqs), p.ackArmed
	p.doneMu.Unlock()
	if n == 1 && !armed || n >= p.ackSoon() {
		select {
		case p.doneSig <- struct{}{}:
		default:
		}
	}
	if !p.s.cfg.ackEach && unfinished <= int64(p.s.cfg.maxUnacked-p.refill()) {
		p.signalProgress()
	}
}

// wakeAcks wakes ackLoop (an AckEach ack failed: it arms the back-off).
func (p *puller) wakeAcks() {
	select {
	case p.doneSig <- struct{}{}:
	default:
	}
}

// signalProgress tells pullLoop there may be room for its next pull.
func (p *puller) signalProgress() {
	select {
	case p.progress <- struct{}{}:
	default:
	}
}

// ackSoon is the finished messages that make an ack due at once (ackLoop's
// ackMin).
func (p *puller) ackSoon() int { return max(1, p.s.cfg.maxUnacked/2) }

// armAck records whether ackLoop's delay timer is armed (see done).
func (p *puller) armAck(armed bool) {
	p.doneMu.Lock()
	p.ackArmed = armed
	p.doneMu.Unlock()
}

// takeDone swaps the finished pull seqs out, handing back spare for reuse;
// disarm also records that ackLoop's delay timer has fired, so the next
// finished message signals (see done).
func (p *puller) takeDone(spare []uint64, disarm bool) []uint64 {
	p.doneMu.Lock()
	out := p.doneSeqs
	p.doneSeqs = spare[:0]
	if disarm {
		p.ackArmed = false
	}
	p.doneMu.Unlock()
	return out
}

// ackDelay bounds how long a finished message waits for its ack while the
// ack loop gathers a fuller range (see ackLoop).
const ackDelay = 5 * time.Millisecond

// ackBackoff is the wait after the n-th failed ack in a row: 50 ms
// doubling up to 800 ms, jittered.
func ackBackoff(n int) time.Duration { return jitter.Nth(50*time.Millisecond, 800*time.Millisecond, n) }

// ackLoop acks the longest finished prefix of pull sequences, one ack in
// flight at a time, and heartbeats while idle (its state and rules are an
// acker's, acker.go). It stops on stopAcks with a final ack.
func (p *puller) ackLoop() {
	defer close(p.ackDone)
	a := newAcker(p)
	defer a.heartbeat.Stop()
	for {
		select {
		case <-p.doneSig:
			a.take(false)
			a.maybeSend()
		case <-a.delay.C:
			// Finished messages since the timer was armed did not signal:
			// take them now, and have the next one signal.
			a.delayArmed = false
			a.take(true)
			a.maybeSend()
		case <-a.heartbeat.C:
			a.beat()
		case <-p.stopAcks:
			a.take(false)
			a.stop()
			return
		}
	}
}

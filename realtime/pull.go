package realtime

import (
	"encoding/binary"
	"errors"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/actor"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/realtime/store"
	"go.uber.org/zap"
)

// actorKey names a pull actor: one per (subject, consumer group), and one
// per (subject, consumer) for broadcast subscribers.
type actorKey struct {
	subject string
	group   string
}

// pullActor serves the pulls of one consumer group of one subject on the
// broker's actor scheduler: its handler runs on one worker at a time and
// yields after a time slice, so a group with many consumers takes turns with
// a group with few. It owns the group's waiting pulls (long polls).
type pullActor struct {
	b     *Broker
	key   actorKey
	actor *actor.Actor[pullEvent]

	// owned by the actor's handler
	waiting  []*pullCall
	timer    *time.Timer
	timerAt  time.Time
	watching bool // the store calls onAppend for the subject (Store.Watch)

	hasWaiting  atomic.Bool // some pull waits for messages
	wakePending atomic.Bool // a wake event is in the mailbox

	share flowShare // recent deliveries (guarded by the broker's fairShare)

	inlineOffUntil atomic.Int64 // Unix ns: pulls go to the workers until then (runInline)
}

// An inline pull that read from the disk (its messages were not in the page
// cache) or took longer than inlineSlow (a lock held long, the thread
// descheduled for long) sends its actor's pulls to the pull workers for
// inlineOff, so a group reading a cold backlog costs its event loop one
// disk read in a while, not one per pull.
const (
	inlineSlow = 20 * time.Millisecond
	inlineOff  = time.Second
)

// runInline handles ev, a new pull, on the calling event loop when
// Options.InlinePulls allows, fair share does not need the pull's wait seen
// (fairShare.inlineOK) and the actor is idle, and reports whether it did
// (see "Inline pulls" in doc.go).
func (a *pullActor) runInline(ev pullEvent) bool {
	if !a.b.opts.InlinePulls {
		return false
	}
	start := time.Now()
	if start.UnixNano() < a.inlineOffUntil.Load() || !a.b.fair.inlineOK(&a.share, start) {
		return false
	}
	runtime.LockOSThread() // threadDiskReads counts this thread's
	reads := threadDiskReads()
	if !a.actor.RunInline(ev) {
		runtime.UnlockOSThread()
		return false
	}
	disk := threadDiskReads() - reads
	runtime.UnlockOSThread()
	a.b.metrics.inline.Inc()
	if took := time.Since(start); disk > 0 || took > inlineSlow {
		a.inlineOffUntil.Store(time.Now().Add(inlineOff).UnixNano())
		a.b.metrics.inlineSlow.Inc()
		a.b.lg.Debug("inline pull read from the disk or was slow: the group's pulls go to the pull workers for a while",
			zap.String("subject", a.key.subject), zap.String("consumer_group", a.key.group), zap.Duration("took", took), zap.Int64("disk_reads", disk))
	}
	return true
}

type eventKind uint8

const (
	evPull     eventKind = iota // a new pull request
	evWake                      // new messages (or returned ones) for the subject
	evTimer                     // a waiting pull's time (or a held message's due time) came
	evShutdown                  // the broker is closing: answer every waiting pull
	evRelease                   // a consumer left or died: hand its un-acked entries back
)

type pullEvent struct {
	kind eventKind
	call *pullCall
	// consumer and why, for evRelease.
	consumer, why string
}

// pullCall is one pull request on its way through an actor.
type pullCall struct {
	r         *netserver.Request
	req       store.PullRequest
	waitUntil time.Time // when a waiting pull is answered empty
	staleAt   time.Time // past this the client has given up: drop
	nextDue   time.Time // a held message is due then
	heldUntil time.Time // held for fair share until then (zero: not held)
	holdEnd   time.Time // served by then however the shares stand
	// after is the pull of the same consumer that waited in the actor when
	// this one arrived: this one waits until that one is answered, so a
	// consumer's pulls take entries in the order they came (a held pull is
	// not overtaken by the pipelined pull behind it).
	after *pullCall
	done  bool // answered (or dropped) after waiting: no longer in waiting
}

func (b *Broker) actorFor(key actorKey) *pullActor {
	b.actorsMu.Lock()
	defer b.actorsMu.Unlock()
	if a := b.actors[key]; a != nil {
		return a
	}
	a := &pullActor{b: b, key: key}
	a.actor = actor.New(b.sched, key.subject+"/"+key.group, 10000, a.handle)
	b.actors[key] = a
	b.bySubject[key.subject] = append(b.bySubject[key.subject], a)
	return a
}

// onAppend runs on the store's commit goroutine when subject has new
// entries: it wakes the subject's actors that have waiting pulls. The store
// calls it only for subjects an actor watches (Store.Watch, on the actor's
// first pull), so the commit of messages over thousands of subjects nobody
// pulls takes no lock and looks up no actors for them.
func (b *Broker) onAppend(subject string, _ int64) {
	b.actorsMu.Lock()
	actors := b.bySubject[subject]
	b.actorsMu.Unlock()
	for _, a := range actors {
		a.wake()
	}
}

func (a *pullActor) wake() {
	if a.hasWaiting.Load() && a.wakePending.CompareAndSwap(false, true) {
		if !a.actor.Send(pullEvent{kind: evWake}) {
			a.wakePending.Store(false)
		}
	}
}

// servePullInline is the pull handler; it runs on the event loop (the mux
// registers it with HandleInline), which saves the hand-off to a serve
// goroutine: each consumer keeps one pull in flight, so every hand-off on
// the way is latency the consumer waits out, and a small group beside a
// flood waits longest. It never blocks: it decodes and checks the pull
// (a bad one is answered on the loop), touches its consumer (a short lock)
// and runs it in its group's actor on the loop when the actor is idle
// (runInline; the answer goes out with the read's write, like any inline
// reply), or, detached, puts it in the actor's mailbox, whose handler (pull
// workers, off the loop) looks in the store and answers it. A pull run
// inline that must wait (a long poll, a fair-share hold, behind an earlier
// pull of its consumer) is detached when it parks.
func (b *Broker) servePullInline(r *netserver.Request) {
	p, err := protocol.DecodePullRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if err := b.checkNames(p.Subject, p.Group, p.ConsumerID); err != nil {
		r.ReplyError(err)
		return
	}
	if !mayConsume(r, p.Subject, p.Group) {
		return
	}
	if b.offline(p.Subject, p.Group, p.ConsumerID) {
		r.ReplyError(protocol.Errorf(protocol.StatusRetryLater, "consumer "+p.ConsumerID+" is offline"))
		return
	}
	wait := min(p.Timeout, b.opts.MaxPullWait)
	if b.life.Closing() {
		wait = 0
	}
	broadcast := p.Flags&protocol.PullBroadcast != 0
	if p.Flags&protocol.PullPipelined != 0 {
		b.metrics.pipelined.Inc()
	}
	// The call keeps the inline request while it runs on the loop (its
	// answer goes out with the read's write); it is detached when it goes
	// to a worker or waits in the actor (park).
	call := &pullCall{
		r: r,
		req: store.PullRequest{
			Subject: p.Subject, Group: p.Group, Consumer: p.ConsumerID,
			Max:          int(min(max(p.Max, 1), uint32(b.opts.MaxPullMessages))),
			KnownPullSeq: p.KnownPullSeq,
			Broadcast:    broadcast,
			Earliest:     p.Flags&protocol.PullEarliest != 0,
			Pipelined:    p.Flags&protocol.PullPipelined != 0,
			TagMode:      p.TagMode,
			Tags:         p.Tags,
			HoldUntilDue: isRetrySubject(p.Subject),
		},
		waitUntil: r.Arrived.Add(wait),
		staleAt:   r.Arrived.Add(wait + b.opts.PullGrace),
	}
	key := actorKey{p.Subject, p.Group}
	if broadcast {
		key.group = "\x00" + p.ConsumerID
	} else {
		b.live.touchAt(p.Subject, p.Group, p.ConsumerID, r.Arrived)
	}
	pa := b.actorFor(key)
	ev := pullEvent{kind: evPull, call: call}
	if pa.runInline(ev) {
		return
	}
	call.r = r.Detach() // answered from the actor's worker
	if !pa.actor.Send(ev) {
		b.metrics.pullDropped.Inc()
		call.r.ReplyError(protocol.Errorf(protocol.StatusBusy, "too many pulls waiting for group "+p.Group))
	}
}

func isRetrySubject(s string) bool {
	kind, _, _, ok := protocol.ParseSystemSubject(s)
	return ok && kind == protocol.KindRetry
}

// handle is the actor's handler.
func (a *pullActor) handle(ev pullEvent) {
	now := time.Now()
	switch ev.kind {
	case evPull:
		c := ev.call
		// Say a pull may wait before looking for messages: an append that
		// lands between an empty look and parking must still wake us (the
		// store calls onAppend only for subjects watched before).
		if !a.watching {
			a.b.st().Watch(a.key.subject)
			a.watching = true
		}
		a.hasWaiting.Store(true)
		if now.After(c.staleAt) {
			a.b.metrics.pullDropped.Inc()
			c.r.ReplyError(protocol.Errorf(protocol.StatusRetryLater, "pull waited past its deadline"))
			return
		}
		c.after = a.waitingOf(c.req.Consumer)
		if c.after != nil || a.holdForFairShare(c, now) || !a.serve(c, now, new(bool)) {
			c.r = c.r.Detach() // a pull run inline waits past the read that brought it
			a.waiting = append(a.waiting, c)
			a.b.metrics.parked.Inc()
		}
	case evWake:
		a.wakePending.Store(false)
		a.serveWaiting(now, false)
	case evTimer:
		a.timerAt = time.Time{}
		a.serveWaiting(now, false)
	case evShutdown:
		a.serveWaiting(now, true)
	case evRelease:
		// Pulls of the consumer that arrived before it left must not take
		// entries after its release: answer its waiting pulls empty first.
		kept := a.waiting[:0]
		for _, c := range a.waiting {
			if c.req.Consumer == ev.consumer {
				a.b.replyPulled(c.r, nil)
				a.b.metrics.parked.Dec()
				c.done = true
				continue
			}
			kept = append(kept, c)
		}
		for i := len(kept); i < len(a.waiting); i++ {
			a.waiting[i] = nil
		}
		a.waiting = kept
		if a.b.returnUnacked(a.key.subject, a.key.group, ev.consumer, ev.why) {
			a.serveWaiting(now, false)
		}
	}
	a.hasWaiting.Store(len(a.waiting) > 0)
	a.arm(now)
}

// holdForFairShare holds a new pull when its actor took more than its
// share of the recent deliveries while other actors drain backlogs too (see
// "Fair share" in doc.go). A held pull is looked at again every recheck
// and served once its actor is back within its share, or when the hold
// ends. A pull that may not wait longer than the hold is not held.
func (a *pullActor) holdForFairShare(c *pullCall, now time.Time) bool {
	f := a.b.fair
	if !f.enabled() {
		return false
	}
	var heldUntil time.Time
	if c.waitUntil.Sub(now) > f.opts.Hold {
		heldUntil = now.Add(f.recheck())
	}
	if !f.arrived(&a.share, now.Sub(c.r.Arrived), now, heldUntil) || heldUntil.IsZero() {
		return false
	}
	c.holdEnd = now.Add(f.opts.Hold)
	c.heldUntil = heldUntil
	f.held.Inc()
	return true
}

// stillHeld reports whether a held pull must go on waiting at now. over
// carries what a look at the shares found during one pass over the waiting
// pulls: once the flow is found over its share at now, it stays over for the
// rest of the pass (its deliveries only grow), so the other held pulls are
// held again without looking (a flood's actor holds a pull per consumer and
// looks at them every millisecond).
func (a *pullActor) stillHeld(c *pullCall, now time.Time, over *bool) bool {
	if c.heldUntil.IsZero() {
		return false
	}
	if now.Before(c.heldUntil) {
		return true
	}
	if now.Before(c.holdEnd) {
		until := now.Add(a.b.fair.recheck())
		if until.After(c.holdEnd) {
			until = c.holdEnd
		}
		if *over || a.b.fair.holdIfOver(&a.share, now, until) {
			*over = true
			c.heldUntil = until
			return true
		}
	}
	c.heldUntil = time.Time{}
	return false
}

// serve tries to answer c now; it reports false when c should wait. over is
// stillHeld's.
func (a *pullActor) serve(c *pullCall, now time.Time, over *bool) bool {
	select {
	case <-c.r.Done():
		// Nobody waits for the answer; a reply to a closed connection is
		// dropped, but an inline request must be answered before its read
		// ends.
		a.b.replyPulled(c.r, nil)
		return true
	default:
	}
	if a.stillHeld(c, now, over) {
		return false
	}
	res, err := a.b.st().Pull(c.req)
	if err != nil {
		c.r.ReplyError(pullStatus(err))
		return true
	}
	if len(res.Messages) > 0 {
		// servePullInline touched the consumer when the pull arrived; a pull
		// that waited (a long poll, a hold) touches it again, as its
		// consumer now holds messages to ack.
		if !c.req.Broadcast && now.Sub(c.r.Arrived) > a.b.opts.ConsumerTimeout/10 {
			a.b.live.touch(c.req.Subject, c.req.Group, c.req.Consumer)
		}
		a.b.metrics.pulled.Add(float64(len(res.Messages)))
		if a.b.fair.enabled() {
			a.b.fair.record(&a.share, len(res.Messages), c.req.Max, now)
		}
		a.b.replyPulled(c.r, res.Messages)
		res.Release() // the reply holds a copy
		return true
	}
	c.nextDue = time.Time{}
	if res.NextDue > 0 {
		c.nextDue = time.UnixMilli(res.NextDue)
	}
	if !now.Before(c.waitUntil) {
		a.b.replyPulled(c.r, nil)
		return true
	}
	return false
}

// serveWaiting retries the waiting pulls in arrival order; expired ones (or
// all, at shutdown) are answered empty.
func (a *pullActor) serveWaiting(now time.Time, all bool) {
	over := false
	kept := a.waiting[:0]
	for _, c := range a.waiting {
		if c.after != nil && c.after.done {
			c.after = nil
		}
		switch {
		case all || !now.Before(c.waitUntil):
			a.b.replyPulled(c.r, nil)
		case c.after != nil || !a.serve(c, now, &over):
			kept = append(kept, c)
			continue
		}
		a.b.metrics.parked.Dec()
		c.done = true
	}
	for i := len(kept); i < len(a.waiting); i++ {
		a.waiting[i] = nil
	}
	a.waiting = kept
}

// waitingOf returns the latest pull of consumer still waiting in the actor
// (nil if none). Pulls whose connection closed do not count.
func (a *pullActor) waitingOf(consumer string) *pullCall {
	for i := len(a.waiting) - 1; i >= 0; i-- {
		c := a.waiting[i]
		if c.req.Consumer != consumer {
			continue
		}
		select {
		case <-c.r.Done():
			continue
		default:
		}
		return c
	}
	return nil
}

// arm sets the timer to the earliest time a waiting pull must be answered
// or a held message falls due.
func (a *pullActor) arm(now time.Time) {
	var next time.Time
	for _, c := range a.waiting {
		at := c.waitUntil
		if !c.nextDue.IsZero() && c.nextDue.Before(at) {
			at = c.nextDue
		}
		if !c.heldUntil.IsZero() && c.heldUntil.Before(at) {
			at = c.heldUntil
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if next.IsZero() || (!a.timerAt.IsZero() && !a.timerAt.After(next)) {
		return
	}
	a.timerAt = next
	d := max(next.Sub(now), time.Millisecond)
	if a.timer == nil {
		a.timer = time.AfterFunc(d, a.fire)
	} else {
		a.timer.Reset(d)
	}
}

func (a *pullActor) fire() {
	if !a.actor.Send(pullEvent{kind: evTimer}) {
		time.AfterFunc(10*time.Millisecond, a.fire)
	}
}

// replyPulled answers a pull with messages (none for an empty answer),
// written once, straight into the connection's reply buffer (pulledBody).
func (b *Broker) replyPulled(r *netserver.Request, msgs []store.Pulled) {
	if len(msgs) == 0 {
		r.Reply(protocol.StatusOK, emptyPull)
		return
	}
	r.ReplyAppend(protocol.StatusOK, pulledBody(msgs))
}

// pulledBody is a pull response body (pkg/protocol, PullResponse) built
// straight into the connection's reply buffer.
type pulledBody []store.Pulled

// BodyLen implements netserver.BodyAppender.
func (p pulledBody) BodyLen() int {
	n := 4 + len(p)*protocol.PullItemHeaderSize
	for i := range p {
		n += len(p[i].Message)
	}
	return n
}

// AppendBody implements netserver.BodyAppender.
func (p pulledBody) AppendBody(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(p)))
	for i := range p {
		m := &p[i]
		dst = protocol.AppendPullItemHeader(dst, uint64(m.PullSeq), uint64(m.ConsumeSeq), len(m.Message))
		dst = append(dst, m.Message...)
	}
	return dst
}

var emptyPull = []byte{0, 0, 0, 0}

// pullStatus maps a store error of a pull or ack to a protocol error.
func pullStatus(err error) error {
	switch {
	case errors.Is(err, store.ErrInvalidRequest):
		return protocol.Errorf(protocol.StatusInvalid, err.Error())
	case errors.Is(err, store.ErrUnknownGroup), errors.Is(err, store.ErrUnknownConsumer):
		return protocol.Errorf(protocol.StatusUnknownGroup, err.Error())
	case errors.Is(err, store.ErrUnknownSubject):
		return protocol.Errorf(protocol.StatusNotFound, err.Error())
	case errors.Is(err, store.ErrClosed):
		return protocol.Errorf(protocol.StatusShuttingDown, err.Error())
	}
	return protocol.Errorf(protocol.StatusStoreError, err.Error())
}

// shutdownPulls answers every waiting pull (Close).
func (b *Broker) shutdownPulls() {
	b.actorsMu.Lock()
	actors := make([]*pullActor, 0, len(b.actors))
	for _, a := range b.actors {
		actors = append(actors, a)
	}
	b.actorsMu.Unlock()
	for _, a := range actors {
		for !a.actor.Send(pullEvent{kind: evShutdown}) {
			time.Sleep(time.Millisecond)
		}
	}
	b.lg.Debug("waiting pulls answered", zap.Int("actors", len(actors)))
}

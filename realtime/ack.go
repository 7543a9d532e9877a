package realtime

import (
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/realtime/store"
	"go.uber.org/zap"
)

// serveAckInline records a consumer's acks. An empty range is a
// heartbeat. Acks above a gap mean the gap's acks were lost after the
// consumer handled or failed those messages: they go to the group's retry
// subject. The release flag hands the consumer's remaining un-acked
// entries back to the group.
//
// It runs on the event loop (the mux registers it with HandleInline): a
// heartbeat, and an ack the store can apply without waiting
// (store.TryAck: no gap, the group's lock free), are answered there with
// the read's write, which saves the two goroutine hand-offs and the
// wake-up of the loop for the reply that an ack otherwise costs, about as
// much as its work. Anything else (a release, a broadcast subscriber's
// ack, a gap, a busy group, an error to report) is detached to its
// consumer's ack queue (ackorder.go), and so is every later ack of that
// consumer until the queue ran dry: a consumer's acks are applied in the
// order they arrived, so pipelined acks never look like lost ones.
//
// A list ack (protocol.AckList) names per-message acks that travelled in
// one request, each a pull seq of its own; applied in order, a run of
// consecutive ones as one store ack (the store's effect is the same: the
// consumer's acked position moves past each). Consecutive throughout, as
// consumer.AckEach sends them, it is applied inline like a range.
func (b *Broker) serveAckInline(r *netserver.Request) {
	a, err := protocol.DecodeAckRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if err := b.checkNames(a.Subject, a.Group, a.ConsumerID); err != nil {
		r.ReplyError(err)
		return
	}
	if !mayConsume(r, a.Subject, a.Group) {
		return
	}
	key := consumerKey{a.Subject, a.Group, a.ConsumerID}
	if b.acks.joinQueue(key, r, a) {
		return
	}
	first, last, n := a.First, a.Last, 1
	if a.Flags == protocol.AckList {
		// Per-message acks that travelled together: inline when they
		// name consecutive pull seqs (as AckEach sends them).
		first, last, n = a.Seqs[0], a.Seqs[len(a.Seqs)-1], len(a.Seqs)
		if !consecutive(a.Seqs) {
			first, last = 1, 0 // not inline: detached below
		}
	}
	if a.Flags&^protocol.AckList == 0 && last <= 1<<62 && (a.Flags == 0 || first <= last) {
		b.live.touchAt(a.Subject, a.Group, a.ConsumerID, r.Arrived)
		if first > last {
			r.Reply(protocol.StatusOK) // a heartbeat
			return
		}
		if _, ok := b.st().TryAck(store.AckRequest{Subject: a.Subject, Group: a.Group, Consumer: a.ConsumerID,
			First: int64(first), Last: int64(last), At: r.Arrived}); ok {
			b.metrics.acked.Add(float64(n))
			r.Reply(protocol.StatusOK)
			return
		}
	}
	if q := b.acks.enqueue(key, r, a); q != nil {
		go b.ackQueueLoop(key, q)
	}
}

// serveAck serves an ack that may wait (see serveAckInline) off the loop.
func (b *Broker) serveAck(r *netserver.Request, a protocol.AckRequest) {
	r.ReplyError(b.applyAck(a))
}

// applyAck applies an ack (its range, then its release flag) and returns
// the error to answer with, nil for StatusOK.
func (b *Broker) applyAck(a protocol.AckRequest) error {
	broadcast := a.Flags&protocol.AckBroadcast != 0
	if !broadcast {
		b.live.touch(a.Subject, a.Group, a.ConsumerID)
	}
	if a.Flags&protocol.AckList != 0 {
		// Each named pull seq in order; a run of consecutive ones is
		// applied as one store ack, as ackQueueLoop applies a run of
		// queued acks.
		for i := 0; i < len(a.Seqs); {
			j := i + 1
			for j < len(a.Seqs) && a.Seqs[j] == a.Seqs[j-1]+1 {
				j++
			}
			if err := b.applyRange(a, a.Seqs[i], a.Seqs[j-1], broadcast); err != nil {
				return err
			}
			b.metrics.acked.Add(float64(j - i - 1)) // applyRange counted one
			i = j
		}
	} else if a.First <= a.Last {
		if err := b.applyRange(a, a.First, a.Last, broadcast); err != nil {
			return err
		}
	}
	if a.Flags&protocol.AckRelease != 0 && !broadcast {
		b.release(a.Subject, a.Group, a.ConsumerID, "consumer left")
	}
	return nil
}

// applyRange applies a's ack of pull seqs first … last.
func (b *Broker) applyRange(a protocol.AckRequest, first, last uint64, broadcast bool) error {
	if last > 1<<62 {
		return protocol.Errorf(protocol.StatusInvalid, "ack range out of bounds")
	}
	res, err := b.st().Ack(store.AckRequest{
		Subject: a.Subject, Group: a.Group, Consumer: a.ConsumerID,
		First: int64(first), Last: int64(last), Broadcast: broadcast,
	})
	if err != nil {
		return pullStatus(err)
	}
	b.metrics.acked.Inc()
	if len(res.Gap) > 0 {
		b.retryLostAcks(a.Subject, a.Group, res.Gap)
	}
	if res.Returned > 0 {
		b.lg.Warn("an ack over a gap wider than any consumer's window: its entries went back to the group",
			zap.String("subject", a.Subject), zap.String("consumer_group", a.Group), zap.String("consumer", a.ConsumerID),
			zap.Uint64("first", first), zap.Int("returned", res.Returned))
	}
	return nil
}

// consecutive reports whether seqs are consecutive pull seqs, ascending.
func consecutive(seqs []uint64) bool {
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			return false
		}
	}
	return true
}

// release hands a consumer's un-acked entries back to its group. It goes
// through the group's actor, after the pulls the consumer sent before, so a
// pull still in the actor cannot take entries for a consumer that left.
func (b *Broker) release(subject, group, consumer, why string) {
	b.live.forget(subject, group, consumer)
	a := b.actorFor(actorKey{subject, group})
	for !a.actor.Send(pullEvent{kind: evRelease, consumer: consumer, why: why}) {
		if b.life.Closing() {
			return
		}
		time.Sleep(time.Millisecond) // a full mailbox drains within slices
	}
}

// returnUnacked hands the entries back (on the group's actor); it reports
// whether any went back.
func (b *Broker) returnUnacked(subject, group, consumer, why string) bool {
	n, err := b.st().ReturnUnacked(subject, group, consumer)
	if err != nil {
		b.lg.Debug("cannot return un-acked entries", zap.String("subject", subject), zap.String("consumer_group", group),
			zap.String("consumer", consumer), zap.Error(err))
		return false
	}
	if n == 0 {
		return false
	}
	b.metrics.returned.Add(float64(n))
	b.lg.Info("un-acked messages handed back to the group", zap.String("subject", subject), zap.String("consumer_group", group),
		zap.String("consumer", consumer), zap.Int("messages", n), zap.String("why", why))
	return true
}

// wakeAlways sends a wake even when no pull is waiting yet.
func (a *pullActor) wakeAlways() {
	if a.wakePending.CompareAndSwap(false, true) {
		if !a.actor.Send(pullEvent{kind: evWake}) {
			a.wakePending.Store(false)
		}
	}
}

// retryLostAcks stores copies of messages whose acks were lost on the
// group's retry subject, due after RetryDelay, with their attempt count
// raised.
func (b *Broker) retryLostAcks(subject, group string, gap []store.Pulled) {
	retrySubject := subject
	if !isRetrySubject(subject) {
		retrySubject = protocol.RetrySubject(protocol.RealSubject(subject), group)
	}
	due := time.Now().Add(b.opts.RetryDelay)
	batch := make([][]byte, 0, len(gap))
	for _, p := range gap {
		m, err := protocol.DecodeMessage(p.Message)
		if err != nil {
			b.lg.Error("cannot decode a stored message for retry", zap.Error(err))
			continue
		}
		m.Subject = retrySubject
		m.Attempts++
		m.DeliverAt = due
		raw, err := protocol.AppendMessage(nil, m, b.limits)
		if err != nil {
			b.lg.Error("cannot re-encode a message for retry", zap.String("id", m.ID), zap.Error(err))
			continue
		}
		batch = append(batch, raw)
	}
	if len(batch) == 0 {
		return
	}
	b.metrics.retried.Add(float64(len(batch)))
	views, results := store.Views(batch, b.limits)
	err := b.st().AppendAsync(views, results, func(results []store.Result) {
		for _, res := range results {
			if res.Err != nil {
				b.lg.Error("lost-ack retry not stored", zap.String("subject", retrySubject), zap.Error(res.Err))
			}
		}
	})
	if err != nil {
		b.lg.Error("lost-ack retries not stored", zap.String("subject", retrySubject), zap.Int("messages", len(batch)), zap.Error(err))
	}
}

package realtime

import (
	"sync"
	"sync/atomic"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// ackOrder keeps each consumer's acks in the order they arrived. An ack
// the event loop cannot apply at once (store.TryAck found the group's lock
// held, a gap, a release…) is detached; without ackOrder the next ack of
// the same consumer, applied inline, would overtake it, and the store
// would take the detached one's message as a lost ack (an ack above an
// un-acked pull sequence) and send it to the retry subject. So once one
// ack of a consumer (subject, group, consumer id) is detached, the
// consumer has a queue: its later acks join the queue instead of running
// inline, and one goroutine (ackQueueLoop) serves the queue in order and
// removes it when it ran dry. The lost-ack rule still holds for acks that
// really skip (a consumer that restarted and lost its acks).
//
// Invariant: while a consumer has a queue, none of its acks is applied
// outside it; a queue is removed (under mu) only once empty and its last
// ack applied, so an ack that finds no queue has nothing of its consumer
// before it still waiting.
type ackOrder struct {
	// active counts the queues: zero lets the loop skip mu (the common
	// case, every ack applied inline).
	active atomic.Int64
	mu     sync.Mutex
	queues map[consumerKey]*ackQueue
}

// ackQueue is one consumer's detached acks, oldest first.
type ackQueue struct {
	pending []queuedAck // guarded by ackOrder.mu
}

// queuedAck is a detached ack request and its decoded body.
type queuedAck struct {
	r *netserver.Request
	a protocol.AckRequest
}

func newAckOrder() *ackOrder {
	return &ackOrder{queues: map[consumerKey]*ackQueue{}}
}

// joinQueue queues r behind its consumer's queued acks, detaching it, if
// the consumer has a queue; it reports whether it did.
func (o *ackOrder) joinQueue(key consumerKey, r *netserver.Request, a protocol.AckRequest) bool {
	if o.active.Load() == 0 {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.queues[key]
	if q == nil {
		return false
	}
	q.pending = append(q.pending, queuedAck{r: r.Detach(), a: a})
	return true
}

// enqueue detaches r and queues it; it returns the queue when it made one
// (the caller starts its ackQueueLoop), nil when r joined an existing one.
func (o *ackOrder) enqueue(key consumerKey, r *netserver.Request, a protocol.AckRequest) *ackQueue {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := queuedAck{r: r.Detach(), a: a}
	if q := o.queues[key]; q != nil {
		q.pending = append(q.pending, d)
		return nil
	}
	q := &ackQueue{pending: []queuedAck{d}}
	o.queues[key] = q
	o.active.Add(1)
	return q
}

// take hands out q's pending acks, swapping in spare; when none are left
// it removes q and returns nil.
func (o *ackOrder) take(key consumerKey, q *ackQueue, spare []queuedAck) []queuedAck {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(q.pending) == 0 {
		delete(o.queues, key)
		o.active.Add(-1)
		return nil
	}
	out := q.pending
	q.pending = spare[:0]
	return out
}

// ackQueueLoop serves a consumer's queued acks in order until the queue
// runs dry. Runs of plain acks whose ranges follow one another are applied
// as one store ack (one lock, one action record) and each answered.
func (b *Broker) ackQueueLoop(key consumerKey, q *ackQueue) {
	var spare []queuedAck
	for {
		batch := b.acks.take(key, q, spare)
		if batch == nil {
			return
		}
		b.metrics.ackQueued.Add(float64(len(batch)))
		for i := 0; i < len(batch); {
			j := i + 1
			if plainAck(batch[i].a) {
				for j < len(batch) && plainAck(batch[j].a) && batch[j].a.First == batch[j-1].a.Last+1 {
					j++
				}
			}
			if j-i == 1 {
				b.serveAck(batch[i].r, batch[i].a)
			} else {
				b.serveAckRun(batch[i:j])
			}
			i = j
		}
		clear(batch)
		spare = batch
	}
}

// plainAck reports whether a is a non-empty range with no flags.
func plainAck(a protocol.AckRequest) bool {
	return a.Flags == 0 && a.First <= a.Last && a.Last <= 1<<62
}

// serveAckRun applies consecutive plain acks of one consumer, whose ranges
// follow one another, as one ack of their union, and answers each with its
// outcome.
func (b *Broker) serveAckRun(run []queuedAck) {
	whole := run[0].a
	whole.Last = run[len(run)-1].a.Last
	err := b.applyAck(whole)
	if err == nil {
		b.metrics.acked.Add(float64(len(run) - 1)) // applyAck counted one
	}
	for _, qa := range run {
		qa.r.ReplyError(err)
	}
}

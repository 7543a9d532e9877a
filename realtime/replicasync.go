package realtime

import (
	"sync"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// copySyncer runs the second and third goroutines of a slave's copy (one
// set per follow): follow writes each chunk as it arrives
// (store.Replica.WriteMessages) and kicks it; copySyncLoop fdatasyncs what
// was written meanwhile and tells the master the new durable end at once
// (a one-way sync request: the master's send replies wait for it), then
// kicks copyIndexLoop, which indexes what the master has committed. A
// fdatasync so covers every chunk that arrived while the one before ran,
// the copy keeps receiving while it syncs, and the next fdatasync does not
// wait for the indexing of the one before (see "Replication" in doc.go).
type copySyncer struct {
	y      *replica
	master string
	kick   chan struct{} // cap 1: something was written
	index  chan struct{} // cap 1: something was synced
	stop   chan struct{}
	wg     sync.WaitGroup // copySyncLoop and copyIndexLoop
	failed chan error     // cap 1: why a loop stopped early (the first)

	// mu guards q, the acknowledgement's fields as follow last set them
	// (MessageDurable is read when one is made). follow holds it across a
	// cut, so an acknowledgement never names the new cut generation with
	// a durable end from before the cut.
	mu    sync.Mutex
	q     protocol.SyncRequest
	acked int64 // the durable end last told
}

func newCopySyncer(y *replica, master string, q protocol.SyncRequest) *copySyncer {
	return &copySyncer{y: y, master: master, q: q, kick: make(chan struct{}, 1), index: make(chan struct{}, 1),
		stop: make(chan struct{}), failed: make(chan error, 1), acked: -1}
}

func (c *copySyncer) start() {
	c.wg.Add(2)
	go c.copySyncLoop()
	go c.copyIndexLoop()
}

// close stops copySyncLoop and copyIndexLoop and waits for them.
func (c *copySyncer) close() {
	close(c.stop)
	c.wg.Wait()
}

// wake asks for a fdatasync of what was written.
func (c *copySyncer) wake() { nudge(c.kick) }

// nudge sends on a channel of capacity 1 unless a signal waits there.
func nudge(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// fail reports why a loop stopped (the first reason only).
func (c *copySyncer) fail(err error) {
	select {
	case c.failed <- err:
	default:
	}
}

// set updates the acknowledgement's fields under mu.
func (c *copySyncer) set(f func(q *protocol.SyncRequest)) {
	c.mu.Lock()
	f(&c.q)
	c.mu.Unlock()
}

// ack returns an acknowledgement naming the copy's durable end, and
// whether that end is news to the master.
func (c *copySyncer) ack() ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, durable := c.y.store.Replica().Ends()
	q := c.q
	q.MessageDurable = min(durable, q.MessageOffset)
	q.MaxBytes, q.WaitMillis = 0, 0
	if q.MessageDurable <= c.acked {
		return nil, false
	}
	c.acked = q.MessageDurable
	return protocol.AppendSyncRequest(nil, &q), true
}

func (c *copySyncer) copySyncLoop() {
	defer c.wg.Done()
	rep := c.y.store.Replica()
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		err := rep.SyncMessages()
		if err == nil {
			if body, news := c.ack(); news {
				err = c.y.client.Notify(c.y.ctx, c.master, protocol.CmdSyncLog, body)
			}
		}
		if err != nil {
			c.fail(err)
			return
		}
		nudge(c.index)
	}
}

// copyIndexLoop indexes the durable records the master has committed
// (store.Replica.IndexMessages) after each fdatasync.
func (c *copySyncer) copyIndexLoop() {
	defer c.wg.Done()
	rep := c.y.store.Replica()
	for {
		select {
		case <-c.stop:
			return
		case <-c.index:
		}
		if err := rep.IndexMessages(); err != nil {
			c.fail(err)
			return
		}
	}
}

package realtime

import (
	"sync"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// copySyncer is the second goroutine of a slave's copy (one per follow):
// follow writes each chunk as it arrives (store.Replica.WriteMessages) and
// kicks it; copySyncLoop fdatasyncs what was written meanwhile, tells the
// master the new durable end at once (a one-way sync request: the
// master's send replies wait for it), then indexes what the master has
// committed. A fdatasync so covers every chunk that arrived while the one
// before ran, and the copy keeps receiving while it syncs (see "Replication"
// in doc.go).
type copySyncer struct {
	y      *replica
	master string
	kick   chan struct{} // cap 1: something was written
	stop   chan struct{}
	done   chan struct{} // closed when copySyncLoop returns
	failed chan error    // cap 1: why copySyncLoop stopped early

	// mu guards q, the acknowledgement's fields as follow last set them
	// (MessageDurable is read when one is made). follow holds it across a
	// cut, so an acknowledgement never names the new cut generation with
	// a durable end from before the cut.
	mu    sync.Mutex
	q     protocol.SyncRequest
	acked int64 // the durable end last told
}

func newCopySyncer(y *replica, master string, q protocol.SyncRequest) *copySyncer {
	return &copySyncer{y: y, master: master, q: q, kick: make(chan struct{}, 1), stop: make(chan struct{}),
		done: make(chan struct{}), failed: make(chan error, 1), acked: -1}
}

func (c *copySyncer) start() { go c.copySyncLoop() }

// close stops copySyncLoop and waits for it.
func (c *copySyncer) close() {
	close(c.stop)
	<-c.done
}

// wake asks for a fdatasync of what was written.
func (c *copySyncer) wake() {
	select {
	case c.kick <- struct{}{}:
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
	defer close(c.done)
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
		if err == nil {
			err = rep.IndexMessages()
		}
		if err != nil {
			c.failed <- err
			return
		}
	}
}

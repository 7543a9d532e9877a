package realtime

import (
	"sync"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/realtime/store"
)

// copySyncer runs the other goroutines of a slave's copy (one set per
// follow): follow writes each chunk as it arrives
// (store.Replica.WriteMessages) and wakes them; two copySyncLoops
// fdatasync what was written meanwhile and tell the master the new durable
// end at once (a one-way sync request: the master's send replies wait for
// it), then kick copyIndexLoop, which indexes what the master has
// committed. A fdatasync so covers every chunk that arrived while the one
// before ran, the copy keeps receiving while it syncs, and the next
// fdatasync does not wait for the indexing of the one before (see
// "Replication" in doc.go). The second loop starts a fdatasync only while
// the first's has run syncOverlapAfter (a slow sync: this disk's flushes
// queue behind the master's), as the master's sync workers do
// (realtime/store groupcommit.go; NOTES.md, "Replication: pipelined
// fetches").
type copySyncer struct {
	y       *replica
	master  string
	syncers [copySyncLoops]*store.ReplicaSyncer
	index   chan struct{}  // cap 1: something was synced
	stop    chan struct{}  // closed: copyIndexLoop stops
	wg      sync.WaitGroup // copySyncLoops and copyIndexLoop
	failed  chan error     // cap 1: why a loop stopped early (the first)

	// smu guards the loops' schedule: written counts wakes (chunks
	// written), covered the wakes a started fdatasync covers.
	smu              sync.Mutex
	wakeUp           *sync.Cond
	written, covered uint64
	running          int
	started          time.Time // when the latest fdatasync began
	stopped          bool

	// mu guards q, the acknowledgement's fields as follow last set them
	// (MessageDurable is read when one is made). follow holds it across a
	// cut, so an acknowledgement never names the new cut generation with
	// a durable end from before the cut.
	mu    sync.Mutex
	q     protocol.SyncRequest
	acked int64 // the durable end last told
}

const (
	// copySyncLoops is how many fdatasyncs of a copy may run at once.
	copySyncLoops = 2
	// syncOverlapAfter is how long a copy's fdatasync runs before a chunk
	// written meanwhile starts one of its own.
	syncOverlapAfter = time.Millisecond
)

// newCopySyncer returns the loops of one follow; they sync through the
// replica's syncers.
func newCopySyncer(y *replica, master string, q protocol.SyncRequest, syncers [copySyncLoops]*store.ReplicaSyncer) *copySyncer {
	c := &copySyncer{y: y, master: master, q: q, syncers: syncers, index: make(chan struct{}, 1),
		stop: make(chan struct{}), failed: make(chan error, 1), acked: -1}
	c.wakeUp = sync.NewCond(&c.smu)
	return c
}

func (c *copySyncer) start() {
	c.wg.Add(copySyncLoops + 1)
	for _, sy := range c.syncers {
		go c.copySyncLoop(sy)
	}
	go c.copyIndexLoop()
}

// close stops copySyncLoops and copyIndexLoop and waits for them.
func (c *copySyncer) close() {
	c.smu.Lock()
	c.stopped = true
	c.wakeUp.Broadcast()
	c.smu.Unlock()
	close(c.stop)
	c.wg.Wait()
}

// wake asks for a fdatasync of what was written.
func (c *copySyncer) wake() {
	c.smu.Lock()
	c.written++
	c.smu.Unlock()
	c.wakeUp.Signal()
}

// next waits until written chunks are not covered by a running fdatasync
// and none runs, or one has run syncOverlapAfter (the next wake looks
// again), and returns false once the loops stop.
func (c *copySyncer) next() bool {
	c.smu.Lock()
	defer c.smu.Unlock()
	for {
		if c.stopped {
			return false
		}
		if c.written > c.covered && (c.running == 0 || time.Since(c.started) >= syncOverlapAfter) {
			break
		}
		c.wakeUp.Wait()
	}
	c.covered = c.written
	c.running++
	c.started = time.Now()
	return true
}

// synced ends a fdatasync.
func (c *copySyncer) synced() {
	c.smu.Lock()
	c.running--
	c.smu.Unlock()
	c.wakeUp.Signal() // chunks written while it ran may wait for it
}

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

func (c *copySyncer) copySyncLoop(sy *store.ReplicaSyncer) {
	defer c.wg.Done()
	for c.next() {
		err := sy.Sync()
		c.synced()
		if err == nil {
			if body, news := c.ack(); news {
				err = c.y.client.Notify(c.y.ctx, c.master, protocol.CmdSyncLog, body)
			}
		}
		if err != nil {
			c.fail(err)
			c.smu.Lock()
			c.stopped = true // the other loop stops too
			c.smu.Unlock()
			c.wakeUp.Broadcast()
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

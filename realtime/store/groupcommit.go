package store

import (
	"fmt"
	"sync"
	"time"

	"github.com/qmq-go/qmq/pkg/segment"
	"go.uber.org/zap"
)

// syncWorkers is how many fdatasyncs of the message log may run at once
// under FlushSync, and syncOverlapAfter how long a sync runs before a
// group written meanwhile starts one of its own instead of waiting for it
// to end (NOTES.md, "Syncs in parallel"). The disk of the 2-core VM took
// 7,100 fdatasyncs a second of 4 KiB appends one at a time, 12,800 two at
// a time, but each sync costs CPU: at once, the second sync made a busy
// host's appends faster and a quiet one's slower. After a millisecond
// (two to three of its usual syncs), a sync is slow, or its worker is
// waiting for a processor to publish.
const (
	syncWorkers      = 2
	syncOverlapAfter = time.Millisecond
)

// groupCommit hands written groups to the sync workers and publishes them
// in the order they were written, each once a sync that began after it was
// written has ended. Every group is published or failed exactly once.
type groupCommit struct {
	mu      sync.Mutex
	wake    *sync.Cond
	pending []*commitGroup // written, not published; in order
	written uint64         // groups written so far (a group's seq is its count)
	covered uint64         // groups a started sync covers
	durable uint64         // groups a finished sync covered
	failed  error          // a sync failed: nothing more is published (until reset)
	closed  bool           // the appender has stopped
	running int            // syncs running
	started time.Time      // when the last one began

	// pubMu keeps publishing in order: a worker holds it from taking its
	// groups off pending until it has published them.
	pubMu sync.Mutex
}

// add queues g, just written; the appender calls it.
func (c *groupCommit) add(g *commitGroup) {
	c.mu.Lock()
	c.written++
	g.seq = c.written
	c.pending = append(c.pending, g)
	// A running sync's worker takes g when it ends, unless it is slow.
	wake := c.canStartLocked()
	c.mu.Unlock()
	if wake {
		c.wake.Signal()
	}
}

// canStartLocked reports whether a worker may start a sync now: written
// groups wait and no sync runs, or the running one has taken
// syncOverlapAfter (c.mu held).
func (c *groupCommit) canStartLocked() bool {
	return c.written > c.covered && (c.running == 0 || time.Since(c.started) >= syncOverlapAfter)
}

// close tells the workers that no group follows; they stop once every
// queued group is published or failed.
func (c *groupCommit) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.wake.Broadcast()
}

// reset clears a sync failure once every group in flight has failed
// (recoverWrites, on the appender, after inflight.Wait).
func (c *groupCommit) reset() {
	c.mu.Lock()
	c.failed = nil
	c.mu.Unlock()
}

// next waits until a sync may start (canStartLocked) and returns how many
// groups it covers, or false when closed and every group is covered. A
// worker waiting while another's sync runs is woken by the next group
// written once that sync has taken syncOverlapAfter; otherwise the
// running worker takes the groups when its sync ends.
func (c *groupCommit) next() (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for !c.canStartLocked() {
		if c.closed && c.written == c.covered {
			c.wake.Broadcast() // the other worker may be waiting for a sync that will not come
			return 0, false
		}
		c.wake.Wait()
	}
	c.covered = c.written
	c.running++
	c.started = time.Now()
	return c.covered, true
}

// syncLoop is one of the message log's sync workers under FlushSync: it
// fdatasyncs (through a segment.Syncer of its own) whenever groups were
// written that no running sync covers, then publishes, in order, every
// group a finished sync covered. It runs while appendLoop writes the next
// groups and another worker may be syncing.
func (s *Store) syncLoop(sy *segment.Syncer) {
	defer s.wg.Done()
	defer sy.Close()
	c := &s.commits
	var done []*commitGroup
	for {
		upTo, ok := c.next()
		if !ok {
			return
		}
		_, err := sy.Sync()
		s.stats.syncs.Add(1)
		c.pubMu.Lock()
		c.mu.Lock()
		if err != nil {
			s.writeFailed.Store(true) // the appender recovers (recoverWrites)
			if c.failed == nil {
				c.failed = err
			}
		}
		failed := c.failed
		c.running--
		c.durable = max(c.durable, upTo)
		n := 0
		for n < len(c.pending) && c.pending[n].seq <= c.durable {
			n++
		}
		done = append(done[:0], c.pending[:n]...)
		c.pending = c.pending[:copy(c.pending, c.pending[n:])]
		c.mu.Unlock()
		for _, g := range done {
			if failed != nil {
				// A sync failed: a later one that succeeded proves nothing
				// about the bytes it lost, so nothing in flight is published.
				s.failGroup(g, fmt.Errorf("%w: %w", ErrIO, failed))
			} else {
				s.publish(g)
			}
			s.inflight.Done()
		}
		c.pubMu.Unlock()
		clear(done)
		if err != nil {
			s.lg.Error("message log sync failed", zap.Error(err))
		}
	}
}

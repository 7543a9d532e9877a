package failover

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/transport"
)

// SlaveWatch is what a master's log shipping records of its slave's
// requests, for the role loop: who the slave is, whether it is connected,
// and the slave lease. Every method is safe for concurrent use and cheap.
//
// The slave lease: each answer carries a stamp (Stamp: this process's
// clock when it was sent); the slave's next requests echo the latest stamp
// it received, whose receipt started its promise not to campaign for the
// lease's length. An echoed stamp s therefore proves the slave promised
// until (its receipt of s) + lease, later than s + lease: the master counts
// its lease until s + lease − margin (the margin covers clock rates).
// Stamps from before Reset (another term, or another process's clock, which
// a slave only echoes on a connection of that process) are ignored.
type SlaveWatch struct {
	lease, margin, suspect time.Duration

	id       atomic.Pointer[string]
	since    atomic.Int64 // Now at Reset: older stamps are another term's
	last     atomic.Int64 // Now of the last request
	open     atomic.Int32 // requests being answered (long polls)
	closedAt atomic.Int64 // Now when a request's connection closed
	until    atomic.Int64 // slave lease deadline (Now; 0 none)

	connMu sync.Mutex
	conn   <-chan struct{} // Done of the slave's latest connection
}

// NewSlaveWatch returns a watch for a slave lease of lease (0: none
// counted) and a slave that is gone once silent for suspect.
func NewSlaveWatch(lease, suspect time.Duration) *SlaveWatch {
	w := &SlaveWatch{lease: lease, margin: leaseMargin(lease), suspect: suspect}
	w.Reset()
	return w
}

// leaseMargin is how much earlier than its slave a master counts the slave
// lease to end.
func leaseMargin(lease time.Duration) time.Duration { return max(lease/10, 100*time.Millisecond) }

// Reset forgets the slave (a new master term).
func (w *SlaveWatch) Reset() {
	empty := ""
	w.id.Store(&empty)
	w.since.Store(Now())
	w.last.Store(0)
	w.closedAt.Store(0)
	w.until.Store(0)
}

// Stamp is the lease stamp of an answer sent now.
func Stamp() uint64 { return uint64(max(Now(), 1)) }

// Request records a request of the slave id (its registered broker id; ""
// when it has none) echoing stamp (0: none).
func (w *SlaveWatch) Request(id string, stamp uint64) {
	now := Now()
	w.last.Store(now)
	if cur := w.id.Load(); *cur != id {
		w.id.Store(&id)
	}
	if s := int64(stamp); stamp != 0 && s >= w.since.Load() && s <= now && w.lease > 0 {
		until := s + int64(w.lease-w.margin)
		for {
			u := w.until.Load()
			if until <= u || w.until.CompareAndSwap(u, until) {
				break
			}
		}
	}
}

// Seen records a request of the slave that names no slave id (a read
// between long polls).
func (w *SlaveWatch) Seen() { w.last.Store(Now()) }

// Conn watches the connection a request of the slave came on (its Done
// channel): when the latest one closes the slave is disconnected at once,
// long poll or not.
func (w *SlaveWatch) Conn(done <-chan struct{}) {
	w.connMu.Lock()
	if w.conn == done {
		w.connMu.Unlock()
		return
	}
	w.conn = done
	w.connMu.Unlock()
	go func() {
		<-done
		w.connMu.Lock()
		latest := w.conn == done
		w.connMu.Unlock()
		if latest {
			w.closedAt.Store(Now())
		}
	}()
}

// Begin marks a request being answered (a long poll: the slave is
// connected while one is open); end is called once it is answered, with
// closed true when its connection closed first.
func (w *SlaveWatch) Begin() (end func(closed bool)) {
	w.open.Add(1)
	return func(closed bool) {
		if closed {
			w.closedAt.Store(Now())
		}
		w.open.Add(-1)
	}
}

// Status returns the slave's id, whether it is connected, and the slave
// lease (Now deadline; 0 none).
func (w *SlaveWatch) Status() (id string, connected bool, leaseUntil int64) {
	last := w.last.Load()
	closed := w.closedAt.Load()
	connected = last != 0 && (w.open.Load() > 0 && closed < last || Since(last) < w.suspect && closed < last)
	return *w.id.Load(), connected, w.until.Load()
}

// CopyWatch is what a slave's log shipping records of its master's
// answers, for the role loop (CopyStatus.Heard, Asked and Failing): the
// master is suspected when a request of the slave's has waited too long
// for its answer, not when the slave itself is slow to ask (a disk stall
// of its own).
type CopyWatch struct {
	heard   atomic.Int64
	asked   atomic.Int64 // Now when the oldest unanswered request was sent (0 none)
	failing atomic.Bool
}

// Asking records that a request expecting an answer is being sent.
func (c *CopyWatch) Asking() { c.asked.CompareAndSwap(0, Now()) }

// Heard records an answer from the master.
func (c *CopyWatch) Heard() {
	c.heard.Store(Now())
	c.asked.Store(0)
	c.failing.Store(false)
}

// Failed records a failed request: one that could not reach the master
// (dial refused, connection closed, timed out, breaker open) makes the
// copy failing until the next answer.
func (c *CopyWatch) Failed(err error) {
	c.asked.Store(0)
	if Unreachable(err) {
		c.failing.Store(true)
	}
}

// Status returns when the master was last heard (Now; 0 never), when the
// oldest unanswered request was sent (0 none) and whether the copy is
// failing.
func (c *CopyWatch) Status() (heard, asked int64, failing bool) {
	return c.heard.Load(), c.asked.Load(), c.failing.Load()
}

// Unreachable reports whether err says a server could not be reached (as
// opposed to an answer refusing the request).
func Unreachable(err error) bool {
	return errors.Is(err, transport.ErrDial) || errors.Is(err, transport.ErrConnClosed) || errors.Is(err, transport.ErrTimeout) ||
		errors.Is(err, transport.ErrBreakerOpen)
}

// NoMasterRetry is how long a slave's copy waits before it asks again for
// the master the meta servers name, when they named none yet: a heartbeat
// of the slave's registration brings it.
const NoMasterRetry = 50 * time.Millisecond

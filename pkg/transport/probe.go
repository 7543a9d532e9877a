package transport

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// A connection whose requests time out is replaced, not kept (doc.go,
// "Unresponsive connections"). Every read of the socket that returns bytes
// is counted (conn.reads), and a request remembers the count when it is
// queued (call.reads). A request whose deadline passes while the count has
// not moved heard nothing at all from the server since it was sent: the
// connection may be cut without a reset. It is then probed: a CmdPing
// with ProbeTimeout, written by writeLoop (never on the goroutine that saw
// the timeout). Any bytes from the server before the probe's deadline (its
// answer or another's) show the connection alive, and it is kept; a long
// poll held by a live server is one such case. Silence closes it, failing
// its pending requests with ErrConnClosed, and the next request dials
// afresh instead of waiting for the kernel's backed-off retransmissions.

// errUnresponsive is why a connection that did not answer its probe was
// closed.
var errUnresponsive = errors.New("the server sent nothing after a request timed out, nor answered a ping")

// readCounter counts the reads of a connection's socket that return bytes.
// Only the holder of the reading role reads, so the count is bumped
// without a locked instruction.
type readCounter struct {
	nc    net.Conn
	reads *atomic.Uint64
}

func (r readCounter) Read(b []byte) (int, error) {
	n, err := r.nc.Read(b)
	if n > 0 {
		r.reads.Store(r.reads.Load() + 1)
	}
	return n, err
}

// noRecord is the breaker step of a probe: its requests' timeouts were
// recorded already.
func noRecord(error) {}

// timedOutLocked is told that cl's deadline passed; it probes the
// connection when nothing was read since cl was queued. c.mu is held.
func (c *conn) timedOutLocked(cl *call) {
	if c.reads.Load() != cl.reads || c.probing || c.closeErr != nil || c.client.opts.ProbeTimeout < 0 {
		return
	}
	c.probing = true
	c.probeReads = c.reads.Load()
	probe := asyncCallPool.Get().(*call)
	probe.fn, probe.done = c.probeDone, noRecord
	probe.deadline = c.client.coarseNow() + c.client.opts.ProbeTimeout
	c.nextID++
	probe.id = c.nextID
	probe.reads = c.probeReads
	c.pending.put(probe.id, probe)
	if c.reader == nil {
		c.takeReaderLocked(loopReader)
	}
	var hdr [protocol.HeaderSize]byte
	c.wq.append(protocol.AppendHeader(hdr[:0], protocol.Header{
		Version: protocol.Version, Code: uint16(protocol.CmdPing), RequestID: probe.id}))
	if !c.corked {
		c.signalLocked() // writeLoop writes it; a corked reader writes at the end of its batch
	}
}

// probeDone ends a probe: an answer, or bytes read since it was sent, keep
// the connection; silence until its deadline closes it.
func (c *conn) probeDone(_ []byte, err error) {
	c.mu.Lock()
	c.probing = false
	silent := errors.Is(err, ErrTimeout) && c.reads.Load() == c.probeReads && c.closeErr == nil
	c.mu.Unlock()
	if !silent {
		return
	}
	c.lg.Warn("closing a connection that stopped answering", zap.Duration("probe_timeout", c.client.opts.ProbeTimeout))
	c.close(fmt.Errorf("%w (probe timeout %v)", errUnresponsive, c.client.opts.ProbeTimeout))
}

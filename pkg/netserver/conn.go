package netserver

import (
	"encoding/binary"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// maxSpareReplyBuffer is the largest reply buffer a connection keeps for
// reuse after a flush; larger ones go back to the garbage collector.
const maxSpareReplyBuffer = 1 << 20

// Conn is the server side of one client connection. Its methods are safe
// for concurrent use.
type Conn struct {
	id     uint64
	remote string
	gc     gnet.Conn // only AsyncWritev and Close are used off the loop
	srv    *Server
	done   chan struct{}

	// inflight counts requests handed to the handler and not yet answered
	// (for MaxInFlight). It is incremented on the event loop and decremented
	// under outMu while the connection is open; OnClose takes what is left
	// off the server's busy count.
	inflight atomic.Int64

	// inMu guards the serve goroutine's inbox.
	inMu    sync.Mutex
	inbox   []*Request
	inSpare []*Request
	serving bool // a serveLoop goroutine is running

	// outMu guards the reply buffer and the connection's open state.
	outMu       sync.Mutex
	out         []byte // replies waiting for the next flush
	outSpare    []byte
	flushQueued bool // a flush task is queued on the event loop
	corked      bool // serveLoop is running a batch; it flushes at its end
	closed      bool
}

// ID returns the connection's id, unique within its server.
func (c *Conn) ID() uint64 { return c.id }

// RemoteAddr returns the client's address, host:port.
func (c *Conn) RemoteAddr() string { return c.remote }

// Done returns a channel closed when the connection closes.
func (c *Conn) Done() <-chan struct{} { return c.done }

// String describes the connection for logs.
func (c *Conn) String() string { return "conn " + strconv.FormatUint(c.id, 10) + " " + c.remote }

// enqueue hands a batch of requests to the serve goroutine, starting it
// when none runs. It never blocks the event loop.
func (c *Conn) enqueue(batch []*Request) {
	c.inMu.Lock()
	c.inbox = append(c.inbox, batch...)
	start := !c.serving
	c.serving = true
	c.inMu.Unlock()
	if start {
		c.srv.busy.Add(1) // released when serveLoop exits
		c.srv.serving.Add(1)
		go c.serveLoop()
	}
}

// serveLoop calls the handler for queued requests in arrival order and
// exits when the inbox is empty. Replies made while it runs a batch are
// flushed together at the batch's end.
func (c *Conn) serveLoop() {
	defer c.srv.serving.Done()
	for {
		c.inMu.Lock()
		batch := c.inbox
		if len(batch) == 0 {
			c.serving = false
			c.inMu.Unlock()
			c.srv.busy.Add(-1)
			return
		}
		c.inbox = c.inSpare[:0]
		c.inSpare = nil
		c.inMu.Unlock()

		c.cork()
		for _, r := range batch {
			c.srv.handler.Serve(r)
			if r.Header.IsOneWay() {
				c.finishOneWay()
			}
		}
		c.uncork()

		clear(batch)
		c.inMu.Lock()
		if c.inSpare == nil {
			c.inSpare = batch[:0]
		}
		c.inMu.Unlock()
	}
}

func (c *Conn) cork() {
	c.outMu.Lock()
	c.corked = true
	c.outMu.Unlock()
}

func (c *Conn) uncork() {
	c.outMu.Lock()
	c.corked = false
	queue := len(c.out) > 0 && !c.flushQueued && !c.closed
	if queue {
		c.flushQueued = true
		c.srv.busy.Add(1) // released when the flush has run
	}
	c.outMu.Unlock()
	if queue {
		c.queueFlush()
	}
}

// finishOneWay ends a one-way request once the handler returned.
func (c *Conn) finishOneWay() {
	c.outMu.Lock()
	if !c.closed {
		c.inflight.Add(-1)
		c.srv.busy.Add(-1)
	}
	c.outMu.Unlock()
}

// reply appends one response frame to the reply buffer and makes sure a
// flush is queued (unless the serve goroutine will flush at the end of its
// batch). The request's unit of the server's busy count passes to the flush
// it queues, or is released when a queued flush or the serve goroutine
// will carry the reply, so busy never reads zero while a reply is unsent.
func (c *Conn) reply(requestID uint64, status protocol.Status, body [][]byte) {
	n := 0
	for _, b := range body {
		n += len(b)
	}
	if n > c.srv.opts.MaxFrameSize {
		c.srv.lg.Error("reply over the maximum frame size",
			zap.Uint64("conn", c.id), zap.Uint64("request", requestID), zap.Int("bytes", n))
		status = protocol.StatusInternal
		body = [][]byte{[]byte("netserver: reply of " + strconv.Itoa(n) + " bytes is over the maximum frame size")}
		n = len(body[0])
	}

	c.outMu.Lock()
	if c.closed {
		c.outMu.Unlock()
		return
	}
	c.inflight.Add(-1)
	c.out = appendResponseHeader(c.out, status, requestID, n)
	for _, b := range body {
		c.out = append(c.out, b...)
	}
	if len(c.out) > c.srv.opts.MaxOutboundBytes {
		c.outMu.Unlock()
		c.srv.busy.Add(-1)
		c.closeWithReason("unsent replies over MaxOutboundBytes", zap.Int("limit", c.srv.opts.MaxOutboundBytes))
		return
	}
	queue := !c.corked && !c.flushQueued
	if queue {
		c.flushQueued = true // the request's busy unit passes to the flush
	} else {
		c.srv.busy.Add(-1)
	}
	c.outMu.Unlock()
	if queue {
		c.queueFlush()
	}
}

// appendResponseHeader appends a response header for a body of n bytes.
//
//	magic u16 | version u8 | flags u8 (response) | status u16 | request id u64 | body length u32
func appendResponseHeader(dst []byte, status protocol.Status, requestID uint64, n int) []byte {
	dst = binary.BigEndian.AppendUint16(dst, protocol.Magic)
	dst = append(dst, protocol.Version, uint8(protocol.FlagResponse))
	dst = binary.BigEndian.AppendUint16(dst, uint16(status))
	dst = binary.BigEndian.AppendUint64(dst, requestID)
	return binary.BigEndian.AppendUint32(dst, uint32(n))
}

// queueFlush asks the event loop to write the reply buffer. It is called
// outside outMu with flushQueued just set and a busy unit held for the
// flush.
func (c *Conn) queueFlush() {
	if err := c.gc.AsyncWritev(nil, c.flush); err != nil {
		c.outMu.Lock()
		c.flushQueued = false
		c.outMu.Unlock()
		c.srv.busy.Add(-1)
	}
}

// flush runs on the event loop: it takes the whole reply buffer and writes
// it with one write (gnet copies what the socket does not take into the
// connection's outbound buffer), then closes the connection if its unsent
// bytes are over the limit.
func (c *Conn) flush(gc gnet.Conn, err error) error {
	defer c.srv.busy.Add(-1)
	c.outMu.Lock()
	buf := c.out
	c.out = c.outSpare[:0]
	c.outSpare = nil
	c.flushQueued = false
	c.outMu.Unlock()
	if err != nil || len(buf) == 0 {
		return nil
	}
	_, _ = gc.Write(buf)
	if cap(buf) <= maxSpareReplyBuffer {
		c.outMu.Lock()
		if c.outSpare == nil {
			c.outSpare = buf[:0]
		}
		c.outMu.Unlock()
	}
	if n := gc.OutboundBuffered(); n > c.srv.opts.MaxOutboundBytes {
		c.closeWithReason("unsent replies over MaxOutboundBytes (client does not read)",
			zap.Int("unsent", n), zap.Int("limit", c.srv.opts.MaxOutboundBytes))
	}
	return nil
}

// closeWithReason logs why the server closes the connection and closes it.
func (c *Conn) closeWithReason(reason string, fields ...zap.Field) {
	c.srv.lg.Warn("closing connection", append([]zap.Field{
		zap.Uint64("conn", c.id), zap.String("remote", c.remote), zap.String("reason", reason)}, fields...)...)
	_ = c.gc.Close()
}

// markClosed runs in OnClose: later replies are dropped, the requests still
// in flight stop counting towards the server's drain, and Done is closed.
func (c *Conn) markClosed() {
	c.outMu.Lock()
	if c.closed {
		c.outMu.Unlock()
		return
	}
	c.closed = true
	c.out, c.outSpare = nil, nil
	c.srv.busy.Add(-c.inflight.Swap(0))
	c.outMu.Unlock()
	close(c.done)
}

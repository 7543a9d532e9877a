package netserver

import (
	"encoding/binary"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/busypoll"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// maxSpareReplyBuffer is the largest reply buffer a connection keeps for
// reuse after a flush; larger ones go back to the garbage collector.
const maxSpareReplyBuffer = 1 << 20

// minRetainedBody is the smallest body slice ReplyRetained keeps instead of
// copying (a smaller one costs less to copy than an iovec), and
// maxRetainedBodies bounds the slices one flush writes with one writev
// (the kernel takes at most 1024 iovecs); past it bodies are copied.
const (
	minRetainedBody   = 16 << 10
	maxRetainedBodies = 256
)

// retainedBody is a ReplyRetained body slice written in place: it goes
// after the first at bytes of the reply buffer.
type retainedBody struct {
	at   int
	body []byte
}

// Conn is the server side of one client connection. Its exported methods
// are safe for concurrent use.
//
// A connection's loop is the gnet event loop that reads it; with TLS the
// loop reads and writes through the connection's session (tls.go), with the
// same framing (serveFrames) and loop state.
//
// Accounting: held counts the connection's requests that were handed to the
// handler (or to CmdAuth's goroutine) and whose replies are not yet written
// (a one-way request counts until its Serve returned): the loop adds each
// batch, flush subtracts the replies it wrote (on the loop), closing
// subtracts the rest. The server's
// busy count is the sum of held over open connections, so a graceful Close
// waits on it. Replies add to unwritten under outMu; flush takes that
// number with the bytes.
type Conn struct {
	id     uint64
	remote string
	gc     gnet.Conn // off the loop only AsyncWritev and Close are used
	tls    *tlsConn  // TLS only
	srv    *Server
	done   chan struct{}

	reasonLogged atomic.Bool // the server logged why it closes the connection

	// principal is who the connection is (nil: auth.Open without
	// RequireAuth, nobody with it). identity is the key it is counted
	// under in the server's identityConns, guarded by their mutex.
	principal    atomic.Pointer[auth.Principal]
	identity     string
	authFailures atomic.Int32 // failed CmdAuth requests
	authBusy     atomic.Bool  // a CmdAuth is being checked
	// authVersion is Auth.Version() when the loop last refreshed the
	// principal; 0 makes the loop refresh it on the next request.
	authVersion atomic.Uint64

	held     atomic.Int64 // see Accounting above
	received atomic.Int64 // bytes read so far (the sweep's measure of progress)
	framing  atomic.Bool  // part of a frame is held (a frame is in progress)

	// Sweep state (sweep.go), touched only by the sweep goroutine.
	sweepReceived int64     // received when the sweep last looked
	sweepActive   time.Time // when the sweep last saw bytes or requests in flight
	rateFrom      time.Time // start of the MinReadRate window (zero: no frame in progress)
	rateBytes     int64     // received at rateFrom
	rateSeen      int64     // bytes received in the window that was too slow
	sweepClosed   bool      // the sweep closed the connection
	// lingerSince is when a refused gnet connection began lingering
	// (unix nanoseconds; 0: it is not), for the sweep.
	lingerSince atomic.Int64

	// Loop state.
	smallHeld int64       // what the small incomplete frame counts in partialBytes
	large     *largeFrame // a large frame in progress
	buffered  int         // bytes gnet kept after the last read (gnet only)
	// lingerAfter: the loop refused the connection, which lingers before
	// it closes (linger.go); discarding: it lingers (gnet only).
	lingerAfter bool
	discarding  bool
	loop        *loop   // the connection's event loop (Spin, TLS buffers)
	fd          int     // the socket, for Spin
	inline      Request // the request passed to inline handlers
	loopOut     []byte  // replies made on the loop, written at the end of OnTraffic
	// afterWrite is work inline handlers left for after that write
	// (Request.AfterWrite), run in order once it is made.
	afterWrite []AfterWriter
	// spin decides whether the loop spins after an answered read.
	spin    busypoll.Budget
	flushFn gnet.AsyncCallback

	// inMu guards the serve goroutine's inbox.
	inMu    sync.Mutex
	inbox   []rawBatch
	inSpare []rawBatch
	serving bool // a serveLoop goroutine is running

	// outMu guards the reply buffer and the connection's open state.
	outMu       sync.Mutex
	out         []byte // replies waiting for the next flush
	outSpare    []byte
	unwritten   int  // requests answered (or one-way and served) since the last flush
	flushQueued bool // a flush task is queued on the event loop
	corks       int  // batches running (serveLoop); the last to end flushes
	closed      bool
	closeAfter  string // close once the replies queued so far are written, for this reason
	// ReplyRetained's bodies between out's bytes, the bytes they add, and
	// the callbacks to run once the flush wrote them (their spares).
	retained      []retainedBody
	retainedBytes int
	releases      []func()
	spareRetained []retainedBody
	spareReleases []func()
}

// newConn returns the state of a connection gnet accepted.
func newConn(s *Server, gc gnet.Conn) *Conn {
	c := newConnState(s, gc.RemoteAddr().String())
	c.gc = gc
	c.flushFn = c.flush
	c.fd = gc.Fd()
	return c
}

// newConnState returns what a connection has on either path.
func newConnState(s *Server, remote string) *Conn {
	c := &Conn{
		id:     s.nextConnID.Add(1),
		remote: remote,
		srv:    s,
		done:   make(chan struct{}),
	}
	c.inline.onLoop = true
	return c
}

// ID returns the connection's id, unique within its server.
func (c *Conn) ID() uint64 { return c.id }

// RemoteAddr returns the client's address, host:port.
func (c *Conn) RemoteAddr() string { return c.remote }

// Done returns a channel closed when the connection closes.
func (c *Conn) Done() <-chan struct{} { return c.done }

// String describes the connection for logs.
func (c *Conn) String() string { return "conn " + strconv.FormatUint(c.id, 10) + " " + c.remote }

// rawBatch is requests of one read, copied out of gnet's buffer as whole
// frames (headers already checked) for the serve goroutine to unpack, so
// the event loop only copies bytes.
type rawBatch struct {
	frames  []byte
	count   int
	arrived time.Time
	large   *frameBuf // frames is this large frame's buffer, of one request (Request.Release gives it back)
}

// enqueue hands a batch of requests to the serve goroutine, starting it
// when none runs. It runs on the event loop and never blocks it.
func (c *Conn) enqueue(b rawBatch) {
	c.inMu.Lock()
	c.inbox = append(c.inbox, b)
	start := !c.serving
	c.serving = true
	c.inMu.Unlock()
	if start {
		c.srv.serveConn(c)
	}
}

// serveLoop calls the handler for queued requests in arrival order and
// returns when the inbox is empty. Replies made while it runs a batch are
// flushed together at the batch's end. It runs on a serve worker
// (serveWorkerLoop), one at a time per connection.
func (c *Conn) serveLoop() {
	for {
		c.inMu.Lock()
		batches := c.inbox
		if len(batches) == 0 {
			c.serving = false
			c.inMu.Unlock()
			return
		}
		c.inbox = c.inSpare[:0]
		c.inSpare = nil
		c.inMu.Unlock()

		c.cork()
		oneWay := 0
		for _, b := range batches {
			reqs := make([]Request, b.count)
			for i, off := 0, 0; i < b.count; i++ {
				h := decodeHeader(b.frames[off:])
				start, end := off+protocol.HeaderSize, off+protocol.HeaderSize+int(h.BodyLen)
				r := &reqs[i]
				r.Header, r.Arrived, r.Conn = h, b.arrived, c
				if end > start {
					r.Body = b.frames[start:end:end]
				}
				if b.large != nil {
					r.frame.Store(b.large)
				}
				off = end
				c.srv.serve(r)
				if h.IsOneWay() {
					oneWay++
				}
			}
		}
		c.uncork(oneWay)

		clear(batches)
		c.inMu.Lock()
		if c.inSpare == nil {
			c.inSpare = batches[:0]
		}
		c.inMu.Unlock()
	}
}

// cork starts a batch: replies wait for its end to be flushed together.
func (c *Conn) cork() {
	c.outMu.Lock()
	c.corks++
	c.outMu.Unlock()
}

// uncork ends a batch: served one-way requests count as written, and the
// last batch to end queues a flush of what was answered meanwhile.
func (c *Conn) uncork(oneWay int) {
	c.outMu.Lock()
	c.corks--
	if c.closed {
		c.outMu.Unlock()
		return
	}
	c.unwritten += oneWay
	flush := c.corks == 0 && c.unwritten > 0 && !c.flushQueued
	if flush {
		c.flushQueued = true
	}
	c.outMu.Unlock()
	if flush {
		c.queueFlush()
	}
}

// replyBody checks a reply's size: a body over MaxFrameSize is replaced by
// a StatusInternal error. It returns the status, body and body length to
// send.
func (c *Conn) replyBody(requestID uint64, status protocol.Status, body [][]byte) (protocol.Status, [][]byte, int) {
	n := 0
	for _, b := range body {
		n += len(b)
	}
	if n > c.srv.opts.MaxFrameSize {
		c.srv.lg.Error("reply over the maximum frame size",
			zap.Uint64("conn", c.id), zap.Uint64("request", requestID), zap.Int("bytes", n))
		msg := []byte("netserver: reply of " + strconv.Itoa(n) + " bytes is over the maximum frame size")
		return protocol.StatusInternal, [][]byte{msg}, len(msg)
	}
	return status, body, n
}

// replyOnLoop appends a reply made by an inline handler to the loop buffer,
// which OnTraffic writes when the read is done; no lock is needed.
func (c *Conn) replyOnLoop(requestID uint64, status protocol.Status, body [][]byte) {
	status, body, n := c.replyBody(requestID, status, body)
	c.loopOut = appendResponseHeader(c.loopOut, status, requestID, n)
	for _, b := range body {
		c.loopOut = append(c.loopOut, b...)
	}
}

// reply appends one response frame to the reply buffer and makes sure a
// flush is queued, unless the serve goroutine will queue one at the end of
// its batch. With release set (ReplyRetained) body slices of
// minRetainedBody bytes or more are kept, not copied, and release runs once
// the flush wrote them (or the reply is dropped). A TLS connection copies
// them (its writes go through crypto/tls, which copies anyway).
func (c *Conn) reply(requestID uint64, status protocol.Status, body [][]byte, release func()) {
	status, body, n := c.replyBody(requestID, status, body)
	c.outMu.Lock()
	if c.closed {
		c.outMu.Unlock()
		if release != nil {
			release()
		}
		return
	}
	c.out = appendResponseHeader(c.out, status, requestID, n)
	kept := false
	for _, b := range body {
		if release != nil && c.tls == nil && len(b) >= minRetainedBody && len(c.retained) < maxRetainedBodies {
			c.retained = append(c.retained, retainedBody{at: len(c.out), body: b})
			c.retainedBytes += len(b)
			kept = true
			continue
		}
		c.out = append(c.out, b...)
	}
	if kept {
		c.releases = append(c.releases, release)
	}
	queue, over := c.repliedLocked()
	c.outMu.Unlock()
	if release != nil && !kept {
		release() // everything was copied
	}
	c.afterReply(queue, over) // when over, markClosed releases what was kept
}

// repliedLocked counts a reply just added to the reply buffer and reports
// whether the caller must queue a flush, or close the connection because
// the unsent replies are over MaxOutboundBytes. outMu is held.
func (c *Conn) repliedLocked() (queue, over bool) {
	c.unwritten++
	if len(c.out)+c.retainedBytes > c.srv.opts.MaxOutboundBytes {
		return false, true
	}
	queue = c.corks == 0 && !c.flushQueued
	if queue {
		c.flushQueued = true
	}
	return queue, false
}

// afterReply does what repliedLocked asked for, outside outMu.
func (c *Conn) afterReply(queue, over bool) {
	switch {
	case over:
		c.closeWithReason("unsent replies over MaxOutboundBytes", zap.Int("limit", c.srv.opts.MaxOutboundBytes))
	case queue:
		c.queueFlush()
	}
}

// appendResponseHeader appends a response header for a body of n bytes:
//
//	magic u16 | version u8 | flags u8 (response) | status u16 | request id u64 | body length u32
func appendResponseHeader(dst []byte, status protocol.Status, requestID uint64, n int) []byte {
	dst = binary.BigEndian.AppendUint16(dst, protocol.Magic)
	dst = append(dst, protocol.Version, uint8(protocol.FlagResponse))
	dst = binary.BigEndian.AppendUint16(dst, uint16(status))
	dst = binary.BigEndian.AppendUint64(dst, requestID)
	return binary.BigEndian.AppendUint32(dst, uint32(n))
}

// queueFlush asks the event loop to write the reply buffer. It is called outside outMu with flushQueued just
// set.
func (c *Conn) queueFlush() {
	if err := c.gc.AsyncWritev(nil, c.flushFn); err != nil {
		// The engine is stopping; its close of the connection drops the rest.
		c.outMu.Lock()
		c.flushQueued = false
		c.outMu.Unlock()
	}
}

// flush runs on the event loop: it takes the whole reply buffer and writes
// it with one write (gnet copies what the socket does not take into the
// connection's outbound buffer), releases the written requests from the
// busy count, and closes the connection if its unsent bytes are over the
// limit. err is set when the connection closed first.
func (c *Conn) flush(gc gnet.Conn, err error) error {
	if err != nil {
		return nil // OnClose has released everything
	}
	c.outMu.Lock()
	buf, written := c.out, c.unwritten
	retained, releases := c.retained, c.releases
	c.out, c.outSpare, c.unwritten = c.outSpare[:0], nil, 0
	c.retained, c.retainedBytes, c.spareRetained = c.spareRetained[:0], 0, nil
	c.releases, c.spareReleases = c.spareReleases[:0], nil
	c.flushQueued = false
	closeAfter := c.closeAfter
	c.outMu.Unlock()
	c.held.Add(-int64(written))
	c.srv.busy.Add(-int64(written))
	if c.tls != nil {
		c.writeTLS(gc, buf)
	} else if len(retained) > 0 {
		// One writev of the buffer's stretches and the kept bodies between
		// them; gnet copies what the socket does not take, so the bodies
		// are free once it returns.
		iov := make([][]byte, 0, 2*len(retained)+1)
		prev := 0
		for _, r := range retained {
			if r.at > prev {
				iov = append(iov, buf[prev:r.at])
			}
			iov = append(iov, r.body)
			prev = r.at
		}
		if prev < len(buf) {
			iov = append(iov, buf[prev:])
		}
		_, _ = gc.Writev(iov)
		for _, release := range releases {
			release()
		}
		clear(retained)
		clear(releases)
		c.outMu.Lock()
		if c.spareRetained == nil {
			c.spareRetained, c.spareReleases = retained[:0], releases[:0]
		}
		c.outMu.Unlock()
	} else if len(buf) > 0 {
		_, _ = gc.Write(buf)
	}
	if len(buf) == 0 {
		if closeAfter != "" {
			c.closeWithReason(closeAfter)
		}
		return nil
	}
	if cap(buf) <= maxSpareReplyBuffer {
		c.outMu.Lock()
		if c.outSpare == nil {
			c.outSpare = buf[:0]
		}
		c.outMu.Unlock()
	}
	if n := gc.OutboundBuffered(); n > c.srv.opts.MaxOutboundBytes {
		c.closeWithReason("unsent replies over MaxOutboundBytes (the client does not read)",
			zap.Int("unsent", n), zap.Int("limit", c.srv.opts.MaxOutboundBytes))
	} else if closeAfter != "" {
		c.closeWithReason(closeAfter)
	}
	return nil
}

// closeReason logs why the server closes the connection (at most
// closeLogBurst lines at once and closeLogRate a second per server; the
// next line let through says how many were left out).
func (c *Conn) closeReason(reason string, fields ...zap.Field) {
	c.reasonLogged.Store(true)
	ok, dropped := c.srv.closeLog.allow()
	if !ok {
		return
	}
	fields = append([]zap.Field{zap.Uint64("conn", c.id), zap.String("remote", c.remote), zap.String("reason", reason)}, fields...)
	if dropped > 0 {
		fields = append(fields, zap.Int("unloggedBefore", dropped))
	}
	c.srv.lg.Warn("closing connection", fields...)
}

// closeWithReason logs why the server closes the connection and closes it;
// it may be called from any goroutine.
func (c *Conn) closeWithReason(reason string, fields ...zap.Field) {
	c.closeReason(reason, fields...)
	c.close()
}

// close closes the connection without logging; any goroutine may call it.
func (c *Conn) close() {
	_ = c.gc.Close()
}

// closeAfterReplies closes the connection, for reason, once the replies
// queued so far are written (the answer to a third failed CmdAuth). It
// may be called from any goroutine.
func (c *Conn) closeAfterReplies(reason string) {
	c.outMu.Lock()
	if c.closed {
		c.outMu.Unlock()
		return
	}
	c.closeAfter = reason
	queue := !c.flushQueued
	c.flushQueued = true
	c.outMu.Unlock()
	if queue {
		c.queueFlush()
	}
}

// markClosed runs in OnClose, on the event loop: later replies are
// dropped, the connection's held requests leave the busy count, and Done is
// closed.
func (c *Conn) markClosed() {
	c.outMu.Lock()
	if c.closed {
		c.outMu.Unlock()
		return
	}
	c.closed = true
	c.out, c.outSpare, c.unwritten = nil, nil, 0
	releases := c.releases
	c.retained, c.retainedBytes, c.releases, c.spareRetained, c.spareReleases = nil, 0, nil, nil, nil
	c.outMu.Unlock()
	for _, release := range releases {
		release() // replies never written
	}
	c.srv.busy.Add(-c.held.Swap(0))
	close(c.done)
}

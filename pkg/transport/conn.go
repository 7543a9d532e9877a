package transport

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/busypoll"
	"github.com/qmq-go/qmq/pkg/protocol"
)

const (
	// readBufferSize is the size of a connection's read buffer.
	readBufferSize = 64 << 10
	// maxSpareWriteBuffer is the largest write buffer kept for reuse.
	maxSpareWriteBuffer = 2 * writeChunk
)

// call is one request waiting for its response. Whoever removes it from its
// connection's pending map (the reader, the timeout sweep, a cancelling
// caller, or the connection's close) completes it, exactly once.
type call struct {
	id       uint64
	deadline time.Duration // since the client's epoch
	fn       func(body []byte, err error)
	into     []byte // GoInto's buffer for the response body
	// ch takes a Call's result, and before it at most one hand-over of the
	// reading role (result.lead): buffered with 2, it never blocks.
	ch   chan result
	done func(error) // the breaker's second step
	// Reading role (reader.go), under the connection's mu: leads is set
	// when the Call took the role as it was sent, following while it waits
	// on a leader, readerGen is the connection's readerGen when it took the
	// role.
	leads     bool
	following bool
	followAt  int // index in the connection's followers while following
	readerGen uint64
	// reads is the connection's read count when the call was queued
	// (probe.go).
	reads uint64
	// A Call's body queued without a copy (writeQueue.borrow): its index
	// in the queue's segments and the take that writes it.
	borrowed bool
	seg      int
	take     uint64
}

type result struct {
	body []byte
	err  error
	lead bool // not a result: the call now holds the reading role
}

// asyncCallPool recycles the calls of Go: once completed, a call is
// referenced by nobody.
var asyncCallPool = sync.Pool{New: func() any { return new(call) }}

func (cl *call) complete(body []byte, err error) {
	cl.done(err)
	if fn := cl.fn; fn != nil {
		cl.recycle()
		fn(body, err)
		return
	}
	cl.ch <- result{body: body, err: err}
}

// recycle returns a Go call to its pool.
func (cl *call) recycle() {
	*cl = call{}
	asyncCallPool.Put(cl)
}

// conn is one pipelined connection to a server: callers append request
// frames to a shared buffer that writeLoop writes in one go, and the holder
// of the reading role (reader.go: readLoop or a Call's caller) matches
// responses to pending calls by request id.
type conn struct {
	client *Client
	addr   string
	nc     net.Conn // requests and responses: sock, or a TLS connection over it
	sock   net.Conn // the TCP connection
	lg     *zap.Logger

	closedFlag atomic.Bool
	done       chan struct{} // closed by close
	// intoCalls counts pending calls with a GoInto buffer (changed under
	// mu), so the reader looks them up only when there are some.
	intoCalls atomic.Int32
	// reads counts the socket's reads that returned bytes (probe.go).
	reads atomic.Uint64

	mu      sync.Mutex
	nextID  uint64
	pending pendingCalls
	wq      writeQueue // frames waiting to be written
	// wsegs, wchunks and wvec are the writer's: what it took, and scratch
	// space for the writev.
	wsegs, wchunks [][]byte
	wvec           net.Buffers
	// written is the last take (writeQueue.takes) whose write returned;
	// released is signalled then when borrowers wait for it (release).
	written   uint64
	borrowers int
	released  sync.Cond
	// writeDeadline is the socket's write deadline (since the client's
	// epoch); only the goroutine writing (see writing) touches it.
	writeDeadline time.Duration
	signalled     bool  // writeLoop has been woken for wq
	writing       bool  // a goroutine is writing taken bytes; only one at a time
	corked        bool  // readLoop is completing a batch; it writes wq at the end
	closeErr      error // why the connection closed
	wake          chan struct{}
	// A probe of a connection whose request timed out unanswered
	// (probe.go): in flight, and the read count when it was sent.
	probing    bool
	probeReads uint64

	// The reading role (reader.go).
	reader    *call   // who reads: nil (nobody), loopReader, or a leading Call
	readerGen uint64  // counts hand-overs of the role
	sweptGen  uint64  // readerGen at the previous sweep
	followers []*call // Calls waiting on a leader (call.followAt: index)
	readWake  chan struct{}
	br        *bufio.Reader // the holder's
	rs        readerState   // the holder's
	// Spinning for a lone Call's answer (Options.Spin; readOwn): the
	// socket, the holder's budget, and what the last spin saw.
	raw        syscall.RawConn // nil: no spin
	spin       busypoll.Budget
	spinFn     func(fd uintptr)
	spinCaught bool
}

func newConn(client *Client, addr string, nc, sock net.Conn) *conn {
	c := &conn{
		client:   client,
		addr:     addr,
		nc:       nc,
		sock:     sock,
		lg:       client.lg.With(zap.String("addr", addr)),
		done:     make(chan struct{}),
		wake:     make(chan struct{}, 1),
		readWake: make(chan struct{}, 1),
		rs:       readerState{batch: make([]response, 0, maxReadBatch)},
	}
	c.released.L = &c.mu
	c.br = bufio.NewReaderSize(readCounter{nc: nc, reads: &c.reads}, readBufferSize)
	if d := client.opts.Spin; d > 0 {
		// Under TLS the socket is polled as well: bytes on it are a record
		// to decrypt, and a lone request's answer is one record.
		if sc, ok := sock.(syscall.Conn); ok {
			if raw, err := sc.SyscallConn(); err == nil {
				c.raw = raw
				c.spinFn = func(fd uintptr) { c.spinCaught = busypoll.Poll(int(fd), d) }
			}
		}
	}
	client.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	return c
}

func (c *conn) closed() bool { return c.closedFlag.Load() }

// send registers cl (unless it is nil: one-way) and queues the frame. It
// fails with errConnGone when the connection closed before the frame was
// queued; the request was then not sent.
func (c *conn) send(cl *call, cmd protocol.Command, flags protocol.Flags, body []byte) error {
	c.mu.Lock()
	if c.closeErr != nil {
		c.mu.Unlock()
		return errConnGone
	}
	c.nextID++
	id := c.nextID
	if cl != nil {
		cl.id = id
		cl.reads = c.reads.Load()
		c.pending.put(id, cl)
		if cl.into != nil {
			c.intoCalls.Add(1)
		}
		switch {
		case c.reader == nil && cl.fn == nil:
			c.takeReaderLocked(cl) // a Call alone: its caller reads
			cl.leads = true
		case c.reader == nil:
			c.takeReaderLocked(loopReader)
		case c.reader != loopReader && cl.fn == nil:
			c.followLocked(cl)
		}
	}
	var hdr [protocol.HeaderSize]byte
	c.wq.append(protocol.AppendHeader(hdr[:0], protocol.Header{
		Version: protocol.Version, Flags: flags, Code: uint16(cmd), RequestID: id, BodyLen: uint32(len(body))}))
	if cl != nil && cl.fn == nil && len(body) >= minBorrow && c.nc == c.sock {
		// A Call's caller waits for it: its body is written from where it
		// is (release makes sure it is before the Call returns).
		cl.borrowed, cl.seg, cl.take = true, c.wq.borrow(body), c.wq.takes+1
	} else {
		c.wq.append(body)
	}
	switch {
	case c.corked:
		c.mu.Unlock() // readLoop writes at the end of its batch
	case c.writing:
		c.signalLocked() // the writer hands over to writeLoop when done
		c.mu.Unlock()
	default:
		c.writeThroughLocked() // nobody writes: this caller writes now
	}
	return nil
}

// release makes sure cl's body, when it was borrowed (send), is no longer
// referenced by the connection, so that its Call may return: a body still
// queued is replaced by a copy; one taken by a writer is waited for until
// that write returns (bounded by WriteTimeout).
func (c *conn) release(cl *call) {
	if !cl.borrowed {
		return
	}
	cl.borrowed = false
	c.mu.Lock()
	switch {
	case cl.take > c.wq.takes:
		if c.closeErr == nil { // close dropped the queue
			c.wq.unborrow(cl.seg)
		}
	default:
		c.borrowers++
		for c.written < cl.take {
			c.released.Wait()
		}
		c.borrowers--
	}
	c.mu.Unlock()
}

// signalLocked makes sure writeLoop will look at wq. c.mu is held.
func (c *conn) signalLocked() {
	if !c.signalled {
		c.signalled = true
		c.wake <- struct{}{} // never blocks: at most one signal is pending
	}
}

// writeThroughLocked takes wq and writes it on the calling goroutine;
// what others queue meanwhile is left to writeLoop. It is called with c.mu
// held and nobody writing, and returns with c.mu released. Writing on the
// caller's goroutine saves a hand-off to writeLoop when the connection is
// idle (one request in flight) and lets readLoop answer a whole batch of
// callbacks with one write, as a server would.
func (c *conn) writeThroughLocked() {
	segs, chunks := c.wq.take(c.wsegs, c.wchunks)
	take := c.wq.takes
	c.writing = true
	c.mu.Unlock()
	err := c.write(segs)
	c.mu.Lock()
	if err == nil && c.closeErr == nil {
		c.wq.recycle(chunks)
	}
	clear(segs)
	clear(chunks)
	c.wsegs, c.wchunks = segs[:0], chunks[:0]
	c.written = take
	if c.borrowers > 0 {
		c.released.Broadcast()
	}
	c.writing = false
	if err == nil && !c.wq.empty() && !c.corked {
		c.signalLocked()
	}
	c.mu.Unlock()
	if err != nil {
		c.close(fmt.Errorf("write: %w", err))
	}
}

// write writes bufs within WriteTimeout, with one system call when it can.
// Only the goroutine writing (c.writing) calls it.
func (c *conn) write(bufs [][]byte) error {
	if len(bufs) == 0 {
		return nil
	}
	// Move the write deadline only when less than half of WriteTimeout is
	// left (a deadline costs a clock read and a timer update per write).
	wt := c.client.opts.WriteTimeout
	if now := c.client.coarseNow(); now+wt/2 > c.writeDeadline {
		c.writeDeadline = now + wt
		_ = c.nc.SetWriteDeadline(c.client.epoch.Add(c.writeDeadline))
	}
	var err error
	c.wvec, err = writeBuffers(c.nc, bufs, c.wvec)
	return err
}

// writeLoop writes what callers queued while another goroutine was
// writing, everything queued since its last write with one write.
func (c *conn) writeLoop() {
	defer c.client.wg.Done()
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		c.mu.Lock()
		c.signalled = false
		if c.writing || c.corked || c.wq.empty() {
			c.mu.Unlock() // the writer or readLoop takes care of it
			continue
		}
		c.writeThroughLocked()
		if c.closed() {
			return
		}
	}
}

// uncorkLocked ends readLoop's batch: readLoop writes what the callbacks
// queued, unless another goroutine is writing. c.mu is held; it returns
// with c.mu released.
func (c *conn) uncorkLocked() {
	c.corked = false
	switch {
	case c.wq.empty():
		c.mu.Unlock()
	case c.writing:
		c.signalLocked()
		c.mu.Unlock()
	default:
		c.writeThroughLocked()
	}
}

// remove takes the call with id out of the pending map and reports whether
// it was still there (the caller then completes it).
func (c *conn) remove(id uint64) bool {
	c.mu.Lock()
	ok := c.unpendLocked(id) != nil
	c.mu.Unlock()
	return ok
}

// unpendLocked takes the call with id out of the pending map (and out of
// the followers) and returns it, or nil. c.mu is held.
func (c *conn) unpendLocked(id uint64) *call {
	cl := c.pending.take(id)
	if cl == nil {
		return nil
	}
	if cl.into != nil {
		c.intoCalls.Add(-1)
	}
	if cl.following {
		c.unfollowLocked(cl)
	}
	return cl
}

// errDeadline fails a request whose deadline passed.
var errDeadline = fmt.Errorf("%w: %w", ErrTimeout, context.DeadlineExceeded)

// expire fails every pending call whose deadline is not after now.
func (c *conn) expire(now time.Duration) {
	var expired []*call
	c.mu.Lock()
	c.pending.each(func(id uint64, cl *call) {
		if cl.deadline <= now {
			c.unpendLocked(id)
			expired = append(expired, cl)
			if c.reader == cl {
				c.interruptLocked() // a leader blocked in the read
			}
			c.timedOutLocked(cl)
		}
	})
	c.mu.Unlock()
	for _, cl := range expired {
		cl.complete(nil, errDeadline)
	}
}

// idle reports whether no call is pending.
func (c *conn) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending.len() == 0
}

// close closes the socket and fails every pending call with ErrConnClosed
// wrapping cause. Only the first close counts.
func (c *conn) close(cause error) {
	c.mu.Lock()
	if c.closeErr != nil {
		c.mu.Unlock()
		return
	}
	c.closeErr = cause
	c.closedFlag.Store(true)
	pending := c.pending.drain()
	c.intoCalls.Store(0)
	for _, f := range c.followers {
		f.following, f.followAt = false, 0
	}
	c.followers = nil
	c.wq.reset()
	c.mu.Unlock()
	close(c.done)
	// The socket itself: a TLS connection's Close would first send an alert,
	// which can wait 5 s on a peer that stopped reading.
	_ = c.sock.Close()
	if len(pending) > 0 {
		c.lg.Debug("connection closed with requests in flight", zap.Int("pending", len(pending)), zap.Error(cause))
	}
	err := fmt.Errorf("%w: %s: %w", ErrConnClosed, c.addr, cause)
	for _, cl := range pending {
		cl.complete(nil, err)
	}
}

package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
)

const (
	// readBufferSize is the size of a connection's read buffer.
	readBufferSize = 64 << 10
	// maxSpareWriteBuffer is the largest write buffer kept for reuse.
	maxSpareWriteBuffer = 1 << 20
)

// call is one request waiting for its response. Whoever removes it from its
// connection's pending map (the reader, the timeout sweep, a cancelling
// caller, or the connection's close) completes it, exactly once.
type call struct {
	id       uint64
	deadline time.Duration // since the client's epoch
	fn       func(body []byte, err error)
	ch       chan result // sync calls: buffered with 1
	done     func(error) // the breaker's second step
}

type result struct {
	body []byte
	err  error
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
	cl.ch <- result{body, err}
}

// recycle returns a Go call to its pool.
func (cl *call) recycle() {
	*cl = call{}
	asyncCallPool.Put(cl)
}

// conn is one pipelined connection to a server: callers append request
// frames to a shared buffer that writeLoop writes in one go, and readLoop
// matches responses to pending calls by request id.
type conn struct {
	client *Client
	addr   string
	nc     net.Conn
	lg     *zap.Logger

	closedFlag atomic.Bool
	done       chan struct{} // closed by close

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*call
	wbuf    []byte // frames waiting for writeLoop
	wspare  []byte
	// writeDeadline is the socket's write deadline (since the client's
	// epoch); only the goroutine writing (see writing) touches it.
	writeDeadline time.Duration
	signalled     bool  // writeLoop has been woken for wbuf
	writing       bool  // a goroutine is writing taken bytes; only one at a time
	corked        bool  // readLoop is completing a batch; it writes wbuf at the end
	closeErr      error // why the connection closed
	wake          chan struct{}
}

func newConn(client *Client, addr string, nc net.Conn) *conn {
	c := &conn{
		client:  client,
		addr:    addr,
		nc:      nc,
		lg:      client.lg.With(zap.String("addr", addr)),
		done:    make(chan struct{}),
		pending: make(map[uint64]*call),
		wake:    make(chan struct{}, 1),
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
		c.pending[id] = cl
	}
	c.wbuf = protocol.AppendHeader(c.wbuf, protocol.Header{
		Version: protocol.Version, Flags: flags, Code: uint16(cmd), RequestID: id, BodyLen: uint32(len(body))})
	c.wbuf = append(c.wbuf, body...)
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

// signalLocked makes sure writeLoop will look at wbuf. c.mu is held.
func (c *conn) signalLocked() {
	if !c.signalled {
		c.signalled = true
		c.wake <- struct{}{} // never blocks: at most one signal is pending
	}
}

// writeThroughLocked takes wbuf and writes it on the calling goroutine;
// what others queue meanwhile is left to writeLoop. It is called with c.mu
// held and nobody writing, and returns with c.mu released. Writing on the
// caller's goroutine saves a hand-off to writeLoop when the connection is
// idle (one request in flight) and lets readLoop answer a whole batch of
// callbacks with one write, as a server would.
func (c *conn) writeThroughLocked() {
	buf := c.takeLocked()
	c.writing = true
	c.mu.Unlock()
	err := c.write(buf)
	c.mu.Lock()
	c.writing = false
	if err == nil && len(c.wbuf) > 0 && !c.corked {
		c.signalLocked()
	}
	c.mu.Unlock()
	if err != nil {
		c.close(fmt.Errorf("write: %w", err))
	}
}

// takeLocked takes the queued bytes, leaving the spare buffer in their
// place. c.mu is held.
func (c *conn) takeLocked() []byte {
	buf := c.wbuf
	c.wbuf = c.wspare[:0]
	c.wspare = nil
	return buf
}

// write writes buf within WriteTimeout and keeps buf as the spare buffer.
func (c *conn) write(buf []byte) error {
	if len(buf) == 0 {
		return nil
	}
	// Move the write deadline only when less than half of WriteTimeout is
	// left (a deadline costs a clock read and a timer update per write).
	wt := c.client.opts.WriteTimeout
	if now := c.client.coarseNow(); now+wt/2 > c.writeDeadline {
		c.writeDeadline = now + wt
		_ = c.nc.SetWriteDeadline(c.client.epoch.Add(c.writeDeadline))
	}
	if _, err := c.nc.Write(buf); err != nil {
		return err
	}
	if cap(buf) <= maxSpareWriteBuffer {
		c.mu.Lock()
		if c.wspare == nil {
			c.wspare = buf[:0]
		}
		c.mu.Unlock()
	}
	return nil
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
		if c.writing || c.corked || len(c.wbuf) == 0 {
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
	case len(c.wbuf) == 0:
		c.mu.Unlock()
	case c.writing:
		c.signalLocked()
		c.mu.Unlock()
	default:
		c.writeThroughLocked()
	}
}

// maxReadBatch bounds the responses readLoop matches under one lock.
const maxReadBatch = 256

// response is a frame read by readLoop and not yet matched to its call.
type response struct {
	header protocol.Header
	body   []byte
	call   *call
}

// readLoop reads response frames and completes their calls; it closes the
// connection on the first read error or malformed frame. It reads every
// whole frame already buffered before it takes the lock once to match them
// all, and copies their bodies into one block.
func (c *conn) readLoop() {
	defer c.client.wg.Done()
	br := bufio.NewReaderSize(c.nc, readBufferSize)
	maxFrame := c.client.opts.MaxFrameSize
	batch := make([]response, 0, maxReadBatch)
	for {
		// Block for the first frame's header, then take what is buffered.
		if _, err := br.Peek(protocol.HeaderSize); err != nil {
			c.close(fmt.Errorf("read: %w", err))
			return
		}
		buf, _ := br.Peek(br.Buffered())
		off, bodyBytes := 0, 0
		batch = batch[:0]
		for len(batch) < maxReadBatch {
			f, n, err := protocol.ReadFrame(buf[off:], maxFrame)
			if errors.Is(err, protocol.ErrShortHeader) || errors.Is(err, protocol.ErrShortFrame) {
				break
			}
			if err == nil && !f.Header.IsResponse() {
				err = fmt.Errorf("server sent a request frame (command %v)", f.Header.Command())
			}
			if err != nil {
				c.lg.Warn("closing connection: malformed frame from server", zap.Error(err))
				c.close(err)
				return
			}
			batch = append(batch, response{header: f.Header, body: f.Body})
			bodyBytes += len(f.Body)
			off += n
		}
		if len(batch) == 0 {
			// The first frame is larger than what is buffered: read its
			// body straight into its own slice.
			h, _ := protocol.ParseHeader(buf, maxFrame)
			_, _ = br.Discard(protocol.HeaderSize)
			body := make([]byte, h.BodyLen)
			if _, err := io.ReadFull(br, body); err != nil {
				c.close(fmt.Errorf("read: %w", err))
				return
			}
			batch = append(batch, response{header: h, body: body})
		} else {
			block := make([]byte, 0, bodyBytes)
			for i := range batch {
				if b := batch[i].body; len(b) > 0 {
					at := len(block)
					block = append(block, b...)
					batch[i].body = block[at:len(block):len(block)]
				} else {
					batch[i].body = nil
				}
			}
			_, _ = br.Discard(off)
		}

		c.mu.Lock()
		for i := range batch {
			id := batch[i].header.RequestID
			batch[i].call = c.pending[id]
			delete(c.pending, id)
		}
		if c.closeErr == nil {
			c.corked = true // callbacks that send again are written together
		}
		c.mu.Unlock()
		for i := range batch {
			r := &batch[i]
			switch {
			case r.call == nil: // timed out or cancelled meanwhile
			case r.header.Status() != protocol.StatusOK:
				r.call.complete(nil, &protocol.Error{Status: r.header.Status(), Message: string(r.body)})
			default:
				r.call.complete(r.body, nil)
			}
			*r = response{}
		}
		c.mu.Lock()
		c.uncorkLocked()
	}
}

// remove takes the call with id out of the pending map and reports whether
// it was still there (the caller then completes it).
func (c *conn) remove(id uint64) bool {
	c.mu.Lock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	return ok
}

// errDeadline fails a request whose deadline passed.
var errDeadline = fmt.Errorf("%w: %w", ErrTimeout, context.DeadlineExceeded)

// expire fails every pending call whose deadline is not after now.
func (c *conn) expire(now time.Duration) {
	var expired []*call
	c.mu.Lock()
	for id, cl := range c.pending {
		if cl.deadline <= now {
			delete(c.pending, id)
			expired = append(expired, cl)
		}
	}
	c.mu.Unlock()
	for _, cl := range expired {
		cl.complete(nil, errDeadline)
	}
}

// idle reports whether no call is pending.
func (c *conn) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending) == 0
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
	pending := c.pending
	c.pending = nil
	c.wbuf, c.wspare = nil, nil
	c.mu.Unlock()
	close(c.done)
	_ = c.nc.Close()
	if len(pending) > 0 {
		c.lg.Debug("connection closed with requests in flight", zap.Int("pending", len(pending)), zap.Error(cause))
	}
	err := fmt.Errorf("%w: %s: %w", ErrConnClosed, c.addr, cause)
	for _, cl := range pending {
		cl.complete(nil, err)
	}
}

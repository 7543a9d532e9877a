package transport

import (
	"bufio"
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

func (cl *call) complete(body []byte, err error) {
	cl.done(err)
	if cl.fn != nil {
		cl.fn(body, err)
		return
	}
	cl.ch <- result{body, err}
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

	mu        sync.Mutex
	nextID    uint64
	pending   map[uint64]*call
	wbuf      []byte // frames waiting for writeLoop
	wspare    []byte
	signalled bool  // writeLoop has been woken for wbuf
	closeErr  error // why the connection closed
	wake      chan struct{}
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
	signal := !c.signalled
	c.signalled = true
	c.mu.Unlock()
	if signal {
		c.wake <- struct{}{} // never blocks: only the first of a batch sends
	}
	return nil
}

// writeLoop writes everything queued since its last write with one write.
func (c *conn) writeLoop() {
	defer c.client.wg.Done()
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		c.mu.Lock()
		buf := c.wbuf
		c.wbuf = c.wspare[:0]
		c.wspare = nil
		c.signalled = false
		c.mu.Unlock()
		if len(buf) == 0 {
			continue
		}
		if _, err := c.nc.Write(buf); err != nil {
			c.close(fmt.Errorf("write: %w", err))
			return
		}
		if cap(buf) <= maxSpareWriteBuffer {
			c.mu.Lock()
			if c.wspare == nil {
				c.wspare = buf[:0]
			}
			c.mu.Unlock()
		}
	}
}

// readLoop reads response frames and completes their calls; it closes the
// connection on the first read error or malformed frame.
func (c *conn) readLoop() {
	defer c.client.wg.Done()
	br := bufio.NewReaderSize(c.nc, readBufferSize)
	maxFrame := c.client.opts.MaxFrameSize
	for {
		hb, err := br.Peek(protocol.HeaderSize)
		if err != nil {
			c.close(fmt.Errorf("read: %w", err))
			return
		}
		h, err := protocol.ParseHeader(hb, maxFrame)
		if err == nil && !h.IsResponse() {
			err = fmt.Errorf("server sent a request frame (command %v)", h.Command())
		}
		if err != nil {
			c.lg.Warn("closing connection: malformed frame from server", zap.Error(err))
			c.close(err)
			return
		}
		_, _ = br.Discard(protocol.HeaderSize)
		var body []byte
		if h.BodyLen > 0 {
			body = make([]byte, h.BodyLen)
			if _, err := io.ReadFull(br, body); err != nil {
				c.close(fmt.Errorf("read: %w", err))
				return
			}
		}
		c.mu.Lock()
		cl := c.pending[h.RequestID]
		delete(c.pending, h.RequestID)
		c.mu.Unlock()
		if cl == nil {
			continue // timed out or cancelled meanwhile
		}
		if st := h.Status(); st != protocol.StatusOK {
			cl.complete(nil, &protocol.Error{Status: st, Message: string(body)})
			continue
		}
		cl.complete(body, nil)
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
		cl.complete(nil, ErrTimeout)
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

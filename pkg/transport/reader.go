package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// The reading role. One goroutine at a time reads a connection's socket:
// the role's holder. It is readLoop, a Call whose caller reads for itself
// (the leader), or nobody while nothing is pending. A Call that finds
// nobody reading takes the role, writes its request and reads until its own
// response comes, completing the other calls whose responses it reads on the
// way; one request in flight then costs what a raw connection costs (the
// caller blocks in the socket's read), with no wake-up of readLoop and no
// hand-off between goroutines. A Call that finds a leader follows: it waits
// for its response like any call, and may be handed the role. A leader whose
// response came passes the role to a follower still waiting, else to
// readLoop when anything else is pending, else to nobody. A Go request that
// finds nobody reading wakes readLoop, which keeps the role while anything
// is pending, and gives it up when it has answered a Call and nothing is
// left (it keeps it under asynchronous traffic alone, as before the leader
// existed).
//
// A leader blocked in the read cannot watch its context: a cancelled
// context, an expired deadline (the sweep) or a closed connection interrupts
// the read by setting a read deadline in the past (or closing the socket).
// A read deadline is never set for anything else, so a reader that sees one
// clears it and looks again at why it reads; a late interruption meant for
// an earlier leader costs its successor one wasted wake-up, nothing more.
// A frame interrupted half read stays in the connection's reader state for
// the next holder.
//
// Nobody reads an idle connection a leader left: the sweep hands such a
// connection to readLoop when no call took the role since the previous
// sweep, so a server that closes an idle connection is still noticed within
// two sweeps and the next request redials.

// loopReader marks the reading role as readLoop's.
var loopReader = new(call)

// errInterrupted: a read deadline interrupted the read; the connection is
// fine and the holder looks again at why it reads.
var errInterrupted = errors.New("transport: read interrupted")

// longAgo is the read deadline that interrupts a blocked read.
var longAgo = time.Unix(1, 0)

// maxReadBatch bounds the responses a reader matches under one lock.
const maxReadBatch = 256

// response is a frame read and not yet matched to its call.
type response struct {
	header protocol.Header
	body   []byte
	call   *call
	into   []byte // the body, copied into its call's GoInto buffer
}

// bodiesIntoBuffers copies the OK bodies of batch whose calls have a
// GoInto buffer large enough into it (response.into) and returns the bytes
// left for the shared block. The caller holds the reading role.
func (c *conn) bodiesIntoBuffers(batch []response, bodyBytes int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range batch {
		r := &batch[i]
		cl := c.pending.get(r.header.RequestID)
		if cl == nil || cl.into == nil || len(r.body) == 0 || r.header.Status() != protocol.StatusOK || cap(cl.into) < len(r.body) {
			continue
		}
		r.into = append(cl.into[:0], r.body...)
		bodyBytes -= len(r.body)
	}
	return bodyBytes
}

// readerState is what the role's holder uses; only the holder touches it.
// The hand-over of the role under conn.mu orders one holder's use before
// the next's.
type readerState struct {
	batch []response
	// large is a frame larger than the read buffer whose body is being read
	// straight into its own slice; largeRead bytes of it have come. large
	// changes under conn.mu (it is rare), so tests can watch it.
	large     *response
	largeRead int
}

// takeReaderLocked gives the reading role to cl (a waiting Call, or
// loopReader). c.mu is held.
func (c *conn) takeReaderLocked(cl *call) {
	c.reader = cl
	c.readerGen++
	if cl == loopReader { // shared by every connection: never written
		select {
		case c.readWake <- struct{}{}:
		default:
		}
		return
	}
	cl.readerGen = c.readerGen
}

// passReaderLocked is called by the role's holder when it stops reading: the
// role goes to a follower still waiting, else to readLoop when anything is
// pending, else to nobody. c.mu is held.
func (c *conn) passReaderLocked() {
	if c.closeErr != nil {
		c.reader = nil
		return
	}
	if n := len(c.followers); n > 0 {
		f := c.followers[n-1]
		c.unfollowLocked(f)
		c.takeReaderLocked(f)
		f.ch <- result{lead: true} // never blocks: the channel holds a lead and a result
		return
	}
	if c.pending.len() > 0 {
		c.takeReaderLocked(loopReader)
		return
	}
	c.reader = nil
}

// followLocked records that cl, a Call, waits while a leader reads. c.mu is
// held.
func (c *conn) followLocked(cl *call) {
	cl.following = true
	cl.followAt = len(c.followers)
	c.followers = append(c.followers, cl)
}

// unfollowLocked takes cl, a follower, out of the followers at once: calls
// are pooled and reused on other connections, so the list must never hold
// one that stopped following. c.mu is held.
func (c *conn) unfollowLocked(cl *call) {
	last := len(c.followers) - 1
	moved := c.followers[last]
	c.followers[cl.followAt] = moved
	moved.followAt = cl.followAt
	c.followers[last] = nil
	c.followers = c.followers[:last]
	cl.following, cl.followAt = false, 0
}

// interruptLocked interrupts the holder's read, if it is reading. c.mu is
// held.
func (c *conn) interruptLocked() {
	_ = c.nc.SetReadDeadline(longAgo)
}

// idleReader runs on the sweep: it hands a connection nobody has read since
// the previous sweep to readLoop, which notices a server closing it.
func (c *conn) idleReader() {
	c.mu.Lock()
	if c.reader == nil && c.closeErr == nil && c.readerGen == c.sweptGen {
		c.takeReaderLocked(loopReader)
	}
	c.sweptGen = c.readerGen
	c.mu.Unlock()
}

// wait waits for a Call's response: it reads the socket itself while it
// holds the reading role, and otherwise waits to be completed or handed
// the role. A cancelled ctx returns ctx's error unless the call completed
// first.
func (c *conn) wait(ctx context.Context, cl *call) result {
	if cl.leads {
		return c.lead(ctx, cl)
	}
	done := ctx.Done()
	for {
		select {
		case res := <-cl.ch:
			if res.lead {
				return c.lead(ctx, cl)
			}
			return res
		case <-done:
			c.mu.Lock()
			removed := c.unpendLocked(cl.id) != nil
			leading := removed && c.reader == cl // handed the role meanwhile
			if leading {
				c.passReaderLocked()
			}
			if removed && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				c.timedOutLocked(cl)
			}
			c.mu.Unlock()
			if !removed {
				done = nil // completed meanwhile: its result is on the way
				continue
			}
			if leading {
				<-cl.ch // the hand-over
			}
			err := ctxError(ctx.Err())
			cl.done(err)
			return result{err: err}
		}
	}
}

// lead reads the socket on the caller's goroutine until cl completes, then
// passes the reading role on. cl holds the role.
func (c *conn) lead(ctx context.Context, cl *call) result {
	if ctx.Done() != nil {
		gen := cl.readerGen
		stop := context.AfterFunc(ctx, func() {
			c.mu.Lock()
			if c.reader == cl && c.readerGen == gen {
				c.interruptLocked()
			}
			c.mu.Unlock()
		})
		defer stop()
	}
	for {
		select {
		case res := <-cl.ch:
			return c.led(res)
		default:
		}
		if err := ctx.Err(); err != nil {
			c.mu.Lock()
			removed := c.unpendLocked(cl.id) != nil
			if removed && errors.Is(err, context.DeadlineExceeded) {
				c.timedOutLocked(cl)
			}
			c.mu.Unlock()
			if !removed {
				return c.led(<-cl.ch) // completed meanwhile by someone else
			}
			cl.complete(nil, ctxError(err))
			continue
		}
		res, own, err := c.readOwn(cl)
		switch {
		case own == ownAnswered:
			return res
		case own == ownDropped:
			continue // cl was completed meanwhile: its result is on cl.ch
		case err == nil:
			_, err = c.readBatch()
		}
		if err != nil && !errors.Is(err, errInterrupted) {
			return c.led(<-cl.ch) // the connection closed: every pending call failed
		}
		if err != nil {
			// Whoever interrupted the read may have completed cl (or be
			// about to: the sweep completes after it interrupts).
			c.mu.Lock()
			pending := c.pending.get(cl.id) == cl
			c.mu.Unlock()
			if !pending {
				return c.led(<-cl.ch)
			}
		}
	}
}

// ownRead is what readOwn did.
type ownRead int

const (
	ownNothing  ownRead = iota // nothing read: use readBatch (or handle err)
	ownAnswered                // the leader's response: its result is returned
	ownDropped                 // the leader's response, for a call completed meanwhile
)

// readOwn is readBatch for a leader that is alone, as a producer sending
// one message at a time is: when the buffered bytes are exactly one whole
// frame and it answers cl, it matches it, passes the reading role on and
// returns cl's result under one lock, without the batch or cl's channel.
// Otherwise it consumes nothing (ownNothing) and the caller reads with
// readBatch; a read error is returned as readBatch returns it.
func (c *conn) readOwn(cl *call) (result, ownRead, error) {
	if c.rs.large != nil || c.intoCalls.Load() > 0 {
		return result{}, ownNothing, nil
	}
	br := c.br
	if c.raw != nil && br.Buffered() == 0 && c.spin.Should() {
		// Control keeps the socket open while spinFn polls it.
		if err := c.raw.Control(c.spinFn); err == nil {
			c.spin.Record(c.spinCaught)
			c.client.spins.Add(1)
			if c.spinCaught {
				c.client.spinsCaught.Add(1)
			}
		}
	}
	if _, err := br.Peek(protocol.HeaderSize); err != nil {
		return result{}, ownNothing, c.readError(err)
	}
	buf, _ := br.Peek(br.Buffered())
	f, n, err := protocol.ReadFrame(buf, c.client.opts.MaxFrameSize)
	if err != nil || n != len(buf) || !f.Header.IsResponse() || f.Header.RequestID != cl.id {
		return result{}, ownNothing, nil // readBatch reads it (and names what is wrong)
	}
	var res result
	if len(f.Body) > 0 {
		res.body = append([]byte(nil), f.Body...)
	}
	if st := f.Header.Status(); st != protocol.StatusOK {
		res.err = &protocol.Error{Status: st, Message: string(res.body)}
		res.body = nil
	}
	_, _ = br.Discard(n)
	c.mu.Lock()
	mine := c.unpendLocked(cl.id) == cl
	if mine {
		c.passReaderLocked()
	}
	c.mu.Unlock()
	if !mine {
		return result{}, ownDropped, nil
	}
	cl.done(res.err)
	return res, ownAnswered, nil
}

// led passes the reading role on once the leader has its result.
func (c *conn) led(res result) result {
	c.mu.Lock()
	c.passReaderLocked()
	c.mu.Unlock()
	return res
}

// readLoop reads for the connection while it holds the reading role: from
// when a Go request or the sweep hands it the role until it has answered a
// Call and nothing is pending.
func (c *conn) readLoop() {
	defer c.client.wg.Done()
	for {
		select {
		case <-c.readWake:
		case <-c.done:
			return
		}
		for {
			answeredCall, err := c.readBatch()
			if errors.Is(err, errInterrupted) {
				continue
			}
			if err != nil {
				return
			}
			if !answeredCall {
				continue
			}
			c.mu.Lock()
			idle := c.pending.len() == 0
			if idle {
				c.reader = nil
			}
			c.mu.Unlock()
			if idle {
				break
			}
		}
	}
}

// readError turns a failed read into errInterrupted (a read deadline) or
// closes the connection.
func (c *conn) readError(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) && !c.closed() {
		_ = c.nc.SetReadDeadline(time.Time{})
		return errInterrupted
	}
	c.close(fmt.Errorf("read: %w", err))
	return err
}

// readBatch reads at least one whole response frame, every whole frame
// already buffered, and completes their calls. It reports whether one of
// them was a Call's. It returns errInterrupted when a read deadline
// interrupted it, or the error that closed the connection (a read error or
// a malformed frame). The caller holds the reading role.
func (c *conn) readBatch() (answeredCall bool, err error) {
	rs := &c.rs
	br := c.br
	maxFrame := c.client.opts.MaxFrameSize
	batch := rs.batch[:0]
	if rs.large == nil {
		// Block for the first frame's header, then take what is buffered.
		if _, err := br.Peek(protocol.HeaderSize); err != nil {
			return false, c.readError(err)
		}
		buf, _ := br.Peek(br.Buffered())
		off, bodyBytes := 0, 0
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
				return false, err
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
			large := &response{header: h}
			c.mu.Lock()
			if cl := c.pending.get(h.RequestID); cl != nil && h.Status() == protocol.StatusOK && cap(cl.into) >= int(h.BodyLen) {
				large.body = cl.into[:h.BodyLen] // GoInto: see its doc for a call that ends meanwhile
			}
			rs.large, rs.largeRead = large, 0
			c.mu.Unlock()
			if large.body == nil {
				large.body = make([]byte, h.BodyLen)
			}
		} else {
			// Bodies go into one block, or into their GoInto buffers
			// (looked up only when some call of the connection has one).
			if c.intoCalls.Load() > 0 {
				bodyBytes = c.bodiesIntoBuffers(batch, bodyBytes)
			}
			var block []byte
			if bodyBytes > 0 {
				block = make([]byte, 0, bodyBytes)
			}
			for i := range batch {
				switch b := batch[i].body; {
				case batch[i].into != nil:
					batch[i].body, batch[i].into = batch[i].into, nil
				case len(b) > 0:
					at := len(block)
					block = append(block, b...)
					batch[i].body = block[at:len(block):len(block)]
				default:
					batch[i].body = nil
				}
			}
			_, _ = br.Discard(off)
		}
	}
	if rs.large != nil {
		n, err := io.ReadFull(br, rs.large.body[rs.largeRead:])
		rs.largeRead += n
		if err != nil {
			return false, c.readError(err)
		}
		batch = append(batch, *rs.large)
	}

	c.mu.Lock()
	rs.large = nil
	for i := range batch {
		batch[i].call = c.unpendLocked(batch[i].header.RequestID)
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
			answeredCall = answeredCall || r.call.fn == nil
			r.call.complete(nil, &protocol.Error{Status: r.header.Status(), Message: string(r.body)})
		default:
			answeredCall = answeredCall || r.call.fn == nil
			r.call.complete(r.body, nil)
		}
		*r = response{}
	}
	rs.batch = batch[:0]
	c.mu.Lock()
	c.uncorkLocked()
	return answeredCall, nil
}

package netserver

import (
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// Request is one request frame handed to a Handler. The handler owns Body
// (it was copied out of gnet's buffer) and answers with Reply or ReplyError
// exactly once, from any goroutine, now or later; one-way requests
// (Header.IsOneWay) are not answered.
type Request struct {
	// Header is the request's frame header (Command, RequestID, flags).
	Header protocol.Header
	// Body is the request body, owned by the handler. It shares a backing
	// array with the other requests of the same read (keeping it keeps that
	// block alive), but its capacity ends at its length, so appending to it
	// never touches them. For inline handlers it points into gnet's buffer
	// and is valid only until Serve returns. A large frame's body is in a
	// buffer of its own, which the handler may give back for reuse with
	// Release once it holds nothing of the body.
	Body []byte
	// Arrived is when the server read the request from the socket.
	Arrived time.Time
	// Conn is the connection the request came on.
	Conn *Conn

	replied atomic.Bool
	onLoop  bool // the connection's inline request: replies go to its loop buffer
	// owned: the inline request's Body is in the server's own copy of a
	// large frame (takeLarge), not in gnet's buffer: Detach hands it over
	// instead of copying it.
	owned bool
	// frame: Body is in this large frame's buffer, which Release gives
	// back to the server's frame pool (nil: nothing to give back).
	frame atomic.Pointer[frameBuf]
}

// Release says the handler holds no reference into Body any more, nor
// into anything sliced from it: a large frame's buffer (see Body) then
// goes back to the server's frame pool, to be overwritten by another frame
// at once, and Body is set to nil. For any other request it does nothing.
// Call it once the request is answered (Reply copies its body) and every
// slice of the body has been dropped or copied; a handler that never calls
// it leaves the buffer to the garbage collector, which is always safe. It
// may be called from any goroutine, more than once (only the first call
// counts), but not while another goroutine reads Body. After Detach, the
// detached Request owns the buffer: call Release on it, not on the inline
// one. In test binaries the released buffer is filled with a poison byte
// (0xdb) first, so a use after Release shows as corrupt data.
func (r *Request) Release() {
	if f := r.frame.Swap(nil); f != nil {
		r.Body = nil
		r.Conn.srv.frames.put(f)
	}
}

// Command returns the request's command.
func (r *Request) Command() protocol.Command { return r.Header.Command() }

// Done returns a channel closed when the request's connection closes, so a
// long-polling handler can abandon a request nobody waits for.
func (r *Request) Done() <-chan struct{} { return r.Conn.done }

// Reply answers the request with status and a body made of the given
// slices, written one after another. Reply copies the slices into the
// connection's reply buffer before it returns, so the caller may reuse them
// at once (copying measured as fast as writing from the caller's slices,
// and it frees storage buffers as soon as Reply returns). Replies to one
// connection are coalesced into few writes. Only the first Reply or
// ReplyError of a request counts; replies to one-way requests and to
// requests whose connection has closed are dropped. A body over the server's
// MaxFrameSize is replaced by a StatusInternal error response.
func (r *Request) Reply(status protocol.Status, body ...[]byte) {
	if !r.replied.CompareAndSwap(false, true) || r.Header.IsOneWay() {
		return
	}
	if r.onLoop {
		r.Conn.replyOnLoop(r.Header.RequestID, status, body)
		return
	}
	r.Conn.reply(r.Header.RequestID, status, body, nil)
}

// ReplyRetained is Reply without the copy of large body slices: slices of
// 16 KiB or more are written from where they are, so they must not change
// until release (not nil) has been called. release is called exactly once:
// when the reply has been written to the socket or handed to gnet's
// outbound buffer (which copies what the socket does not take), or when the
// reply is dropped (a second reply, a one-way request, a closed
// connection), possibly before ReplyRetained returns. It runs on the event
// loop or on the replying goroutine, so it must be quick and must not
// block. A reply made on the event loop (an inline handler) copies and
// releases at once.
func (r *Request) ReplyRetained(status protocol.Status, release func(), body ...[]byte) {
	if !r.replied.CompareAndSwap(false, true) || r.Header.IsOneWay() {
		release()
		return
	}
	if r.onLoop {
		r.Conn.replyOnLoop(r.Header.RequestID, status, body)
		release()
		return
	}
	r.Conn.reply(r.Header.RequestID, status, body, release)
}

// AfterWriter is work an inline handler leaves for after its reply is on
// the socket (Request.AfterWrite).
type AfterWriter interface {
	// AfterWrite runs once, on the event loop, after the write of the
	// replies made during the read that brought the request (or at once,
	// for a request not served on the loop). It must not block.
	AfterWrite()
}

// AfterWrite runs w.AfterWrite once the reply made on the event loop has
// been written to the socket: an inline handler replies with what the
// client waits for, and leaves the bookkeeping that the reply does not
// depend on (making a stored message readable, metrics) for after the
// write, off the round trip's path. It runs on the loop before the next
// read, even when the write failed or the connection is being closed; a
// panic in it is logged and recovered. Off the loop (a detached request, a
// serve goroutine) it runs w.AfterWrite at once. It allocates nothing when
// w is a pointer.
func (r *Request) AfterWrite(w AfterWriter) {
	if r.onLoop {
		r.Conn.afterWrite = append(r.Conn.afterWrite, w)
		return
	}
	r.Conn.srv.runAfterWrite(w)
}

// Detach lets an inline handler answer later: it returns a Request that
// owns a copy of the body (the body itself when it is the server's own copy
// of a large frame, a send batch of 256 × 256 B for one, and with it the
// frame's buffer for Release), may be answered from any goroutine, and
// counts as in flight like a request served off the loop (Close waits for
// it); the inline request itself counts as answered by it. Call it on the
// connection's loop, before Serve returns. Off the loop it returns r.
func (r *Request) Detach() *Request {
	if !r.onLoop {
		return r
	}
	c := r.Conn
	body := r.Body
	if !r.owned {
		body = append([]byte(nil), r.Body...)
	}
	d := &Request{Header: r.Header, Body: body, Arrived: r.Arrived, Conn: c}
	d.frame.Store(r.frame.Swap(nil))
	r.replied.Store(true)
	if d.Header.IsOneWay() {
		d.replied.Store(true)
	} else {
		c.held.Add(1)
		c.srv.busy.Add(1)
	}
	return d
}

// ReplyError answers the request with the status err carries
// (protocol.StatusOf: a *protocol.Error keeps its status, nil is StatusOK,
// anything else StatusInternal) and a message as the body: a *protocol.Error
// itself sends its Message (the client rebuilds the same *protocol.Error),
// any other error, wrapped ones included, sends err.Error().
func (r *Request) ReplyError(err error) {
	if err == nil {
		r.Reply(protocol.StatusOK)
		return
	}
	if pe, ok := err.(*protocol.Error); ok {
		r.Reply(pe.Status, []byte(pe.Message))
		return
	}
	r.Reply(protocol.StatusOf(err), []byte(err.Error()))
}

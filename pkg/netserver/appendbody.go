package netserver

import (
	"strconv"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// BodyAppender is a reply body that writes itself into the connection's
// reply buffer (Request.ReplyAppend). A reply made of many small slices (a
// pull's item headers and messages) otherwise goes through a slice of
// slices that is walked twice, once to size it and once to copy it; an
// appender is sized once and copied once, straight into place.
type BodyAppender interface {
	// BodyLen is the body's length in bytes.
	BodyLen() int
	// AppendBody appends exactly BodyLen bytes to dst and returns it.
	AppendBody(dst []byte) []byte
}

// appendReply appends a response frame with body to dst: the header, then
// the body in place. A body over the maximum frame size, or one that does
// not append the length it announced (a bug in the appender), is replaced by
// a StatusInternal error.
func (c *Conn) appendReply(dst []byte, requestID uint64, status protocol.Status, body BodyAppender) []byte {
	n := body.BodyLen()
	if n > c.srv.opts.MaxFrameSize {
		c.srv.lg.Error("reply over the maximum frame size",
			zap.Uint64("conn", c.id), zap.Uint64("request", requestID), zap.Int("bytes", n))
		return protocol.AppendResponse(dst, protocol.StatusInternal, requestID,
			[]byte("netserver: reply of "+strconv.Itoa(n)+" bytes is over the maximum frame size"))
	}
	start := len(dst)
	dst = appendResponseHeader(dst, status, requestID, n)
	dst = body.AppendBody(dst)
	if got := len(dst) - start - protocol.HeaderSize; got != n {
		c.srv.lg.Error("reply body appended a length other than it announced",
			zap.Uint64("conn", c.id), zap.Uint64("request", requestID), zap.Int("announced", n), zap.Int("appended", got))
		return protocol.AppendResponse(dst[:start], protocol.StatusInternal, requestID,
			[]byte("netserver: reply body of the wrong length"))
	}
	return dst
}

// replyAppend is reply for a BodyAppender.
func (c *Conn) replyAppend(requestID uint64, status protocol.Status, body BodyAppender) {
	c.outMu.Lock()
	if c.closed {
		c.outMu.Unlock()
		return
	}
	c.out = c.appendReply(c.out, requestID, status, body)
	queue, over := c.repliedLocked()
	c.outMu.Unlock()
	c.afterReply(queue, over)
}

// ReplyAppend is Reply with a body that appends itself into the
// connection's reply buffer before ReplyAppend returns, so the caller may
// reuse what body refers to at once.
func (r *Request) ReplyAppend(status protocol.Status, body BodyAppender) {
	if !r.replied.CompareAndSwap(false, true) || r.Header.IsOneWay() {
		return
	}
	if r.onLoop {
		r.Conn.loopOut = r.Conn.appendReply(r.Conn.loopOut, r.Header.RequestID, status, body)
		return
	}
	r.Conn.replyAppend(r.Header.RequestID, status, body)
}

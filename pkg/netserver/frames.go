package netserver

import (
	"encoding/binary"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// serveFrames serves every whole frame at the front of buf, checking each
// header (the incomplete frame at the end included): requests refused at
// once (shutting down, unauthenticated, too many in flight) and inline
// commands are answered into the loop buffer, CmdAuth goes to its own
// goroutine, and the other frames are copied out into one block for the
// serve goroutine (consecutive frames with one copy). large, when not nil,
// is the server's own copy of a large frame that buf is (takeLarge), which
// the batch may keep instead of copying, and whose request may give it
// back (Request.Release); refused at once, it goes back to the frame pool
// here. It returns the bytes the whole frames take,
// how many frames that is, and false when the connection must be closed
// (the reason is logged). It runs on the connection's event loop.
func (c *Conn) serveFrames(buf []byte, now time.Time, large *frameBuf) (int, int, bool) {
	s := c.srv
	owned := large != nil
	consumed, count := 0, 0
	for len(buf)-consumed >= protocol.HeaderSize {
		hb := buf[consumed:]
		if !wellFormed(hb, s.opts.MaxFrameSize) {
			c.malformed(hb)
			return consumed, count, false
		}
		n := int(binary.BigEndian.Uint32(hb[14:18]))
		if len(hb) < protocol.HeaderSize+n {
			break // wait for the rest
		}
		consumed += protocol.HeaderSize + n
		count++
	}
	if count == 0 {
		return 0, 0, true
	}

	var (
		raw      rawBatch
		runStart = -1 // start of the current run of frames to copy
		closing  = s.closing.Load()
		authed   = c.authenticated()
		handed   = false // a handler (inline, CmdAuth) got a body from buf
	)
	endRun := func(at int) {
		if runStart < 0 {
			return
		}
		switch {
		case owned && raw.frames == nil:
			raw.frames = buf[runStart:at:at]
		case raw.frames == nil:
			raw.frames = make([]byte, 0, consumed-runStart)
			fallthrough
		default:
			raw.frames = append(raw.frames, buf[runStart:at]...)
		}
		runStart = -1
	}
	for off := 0; off < consumed; {
		at := off
		h := decodeHeader(buf[off:])
		body := buf[off+protocol.HeaderSize : off+protocol.HeaderSize+int(h.BodyLen)]
		off += protocol.HeaderSize + int(h.BodyLen)
		switch {
		case closing:
			endRun(at)
			if !h.IsOneWay() {
				c.loopOut = protocol.AppendResponse(c.loopOut, protocol.StatusShuttingDown, h.RequestID, nil)
			}
			continue
		case !authed && h.Code != uint16(protocol.CmdPing) && h.Code != uint16(protocol.CmdAuth):
			endRun(at)
			c.refuseUnauthenticated(h)
			continue
		case c.held.Load()+int64(raw.count) >= int64(s.opts.MaxInFlight):
			endRun(at)
			if !h.IsOneWay() {
				c.loopOut = protocol.AppendResponse(c.loopOut, protocol.StatusBusy, h.RequestID,
					[]byte("netserver: too many requests in flight on this connection"))
			}
			continue
		case h.Code == uint16(protocol.CmdAuth):
			endRun(at)
			c.serveAuth(h, body)
			handed = true
			continue
		}
		if s.inline != nil && s.inline.Inline(h.Command()) {
			endRun(at)
			c.serveInline(h, body, now, large)
			handed = true
			continue
		}
		if runStart < 0 {
			runStart = at
		}
		raw.count++
	}
	endRun(consumed)
	if raw.count > 0 {
		raw.arrived = now
		if owned && raw.count == 1 && len(raw.frames) == len(buf) {
			raw.large = large // the one request's body is in it
		}
		c.held.Add(int64(raw.count))
		s.busy.Add(int64(raw.count))
		c.enqueue(raw)
	} else if owned && !handed {
		s.frames.put(large) // refused on the loop: nothing refers to it
	}
	return consumed, count, true
}

// malformed logs why a frame whose header wellFormed refused closes the
// connection.
func (c *Conn) malformed(hb []byte) {
	if hb[0] == 0x16 && hb[1] == 0x03 { // a TLS record: handshake, version 3.x
		c.closeReason("TLS handshake on a plaintext port")
		return
	}
	if _, err := protocol.ParseHeader(hb, c.srv.opts.MaxFrameSize); err != nil {
		c.closeReason("malformed frame", zap.Error(err))
		return
	}
	c.closeReason("client sent a response frame", zap.Uint64("request", binary.BigEndian.Uint64(hb[6:14])))
}

// serveInline serves one request on the connection's loop with its
// reusable inline Request, whose body points into the read buffer (large
// not nil: into the server's own copy of a large frame, which Detach hands
// over; a request not detached leaves it to the garbage collector, as its
// AfterWrite may still read it).
func (c *Conn) serveInline(h protocol.Header, body []byte, now time.Time, large *frameBuf) {
	r := &c.inline
	r.Header, r.Body, r.Arrived, r.Conn, r.owned = h, body[:len(body):len(body)], now, c, large != nil
	r.frame.Store(large)
	r.replied.Store(false)
	c.srv.serve(r)
	if !r.replied.Load() && !r.Header.IsOneWay() {
		c.srv.lg.Error("inline handler returned without replying", zap.Stringer("command", r.Command()))
		r.ReplyError(protocol.Errorf(protocol.StatusInternal, "no reply"))
	}
	r.Body, r.owned = nil, false
	r.frame.Store(nil)
}

// runAfterWrites runs the work inline handlers left for after the loop's
// write (Request.AfterWrite), in order.
func (c *Conn) runAfterWrites() {
	for i, w := range c.afterWrite {
		c.afterWrite[i] = nil
		c.srv.runAfterWrite(w)
	}
	c.afterWrite = c.afterWrite[:0]
}

// resetLoopOut empties the loop buffer after its write, dropping it when it
// grew large.
func (c *Conn) resetLoopOut() {
	if cap(c.loopOut) > maxSpareReplyBuffer {
		c.loopOut = nil
	} else {
		c.loopOut = c.loopOut[:0]
	}
}

// wellFormed reports whether b starts with the header of a request that
// ParseHeader would accept: the fast path of the framing loop, which calls
// ParseHeader only to name what is wrong.
func wellFormed(b []byte, maxBody int) bool {
	return binary.BigEndian.Uint16(b[0:2]) == protocol.Magic && b[2] == protocol.Version &&
		protocol.Flags(b[3])&^protocol.FlagOneWay == 0 &&
		int64(binary.BigEndian.Uint32(b[14:18])) <= int64(maxBody)
}

// decodeHeader decodes a header that wellFormed accepted.
func decodeHeader(b []byte) protocol.Header {
	return protocol.Header{
		Version:   b[2],
		Flags:     protocol.Flags(b[3]),
		Code:      binary.BigEndian.Uint16(b[4:6]),
		RequestID: binary.BigEndian.Uint64(b[6:14]),
		BodyLen:   binary.BigEndian.Uint32(b[14:18]),
	}
}

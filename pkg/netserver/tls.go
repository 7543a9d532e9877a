package netserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// errWouldBlock is what a TLS session's transport returns on the loop when
// the bytes read so far are used up. It is a temporary net.Error, which
// crypto/tls does not keep: the session reads on at the next call, with the
// part of a record it has kept.
var errWouldBlock = wouldBlockError{}

type wouldBlockError struct{}

func (wouldBlockError) Error() string   { return "netserver: no more bytes read yet" }
func (wouldBlockError) Timeout() bool   { return true }
func (wouldBlockError) Temporary() bool { return true }

// tlsConn is the transport under a connection's TLS session: a net.Conn
// made of memory, between crypto/tls and the event loop. Until the
// handshake is done the session belongs to the connection's handshake
// goroutine: its reads wait for the bytes the loop puts in (feed) and its
// writes go to the socket with AsyncWritev. Once it is done (onLoop) the
// session is the loop's alone: a read takes what the loop's read brought
// (src), or errWouldBlock once that is used up; a write appends the records
// to the loop's buffer, which the loop writes with one write.
type tlsConn struct {
	tc            *tls.Conn
	gc            gnet.Conn
	loop          *loop
	local, remote net.Addr
	// onLoop is set on the loop, by tlsReady, after the handshake
	// goroutine's last read and write: from then on only the loop uses the
	// session.
	onLoop atomic.Bool

	mu     sync.Mutex
	fed    sync.Cond // signalled when bytes come or the connection closes
	in     []byte    // bytes that came before onLoop, not yet read (from off)
	off    int
	closed bool

	src     []byte // on the loop: what the current read brought, not yet read
	partial []byte // on the loop: the plaintext of an incomplete frame between reads

	// Loop state before onLoop: the bytes of in counted in the server's
	// partialBytes, those kept past MaxPartialBytes (at most one record, to
	// learn which request to refuse), and whether bytes were dropped (the
	// connection is refused once the handshake is done).
	counted int64
	over    int
	refuse  bool
}

// maxRecordBytes is the most a TLS record takes on the wire (TLS 1.2's
// bound; a TLS 1.3 record is smaller).
const maxRecordBytes = 5 + 16<<10 + 2048

func newTLSConn(c *Conn, gc gnet.Conn, cfg *tls.Config) *tlsConn {
	t := &tlsConn{gc: gc, loop: c.loop, local: gc.LocalAddr(), remote: gc.RemoteAddr()}
	t.fed.L = &t.mu
	t.tc = tls.Server(t, cfg)
	return t
}

// Read gives crypto/tls the bytes that came: on the loop without waiting,
// before it by waiting for them.
func (t *tlsConn) Read(p []byte) (int, error) {
	if t.onLoop.Load() {
		if t.off < len(t.in) { // what came during the handshake, read once
			t.mu.Lock()
			n := copy(p, t.in[t.off:])
			if t.off += n; t.off == len(t.in) {
				t.in, t.off = nil, 0
			}
			t.mu.Unlock()
			return n, nil
		}
		if len(t.src) == 0 {
			return 0, errWouldBlock
		}
		n := copy(p, t.src)
		t.src = t.src[n:]
		return n, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.off == len(t.in) {
		if t.closed {
			return 0, net.ErrClosed
		}
		t.fed.Wait()
	}
	n := copy(p, t.in[t.off:])
	t.off += n
	return n, nil
}

// Write sends records: on the loop into its buffer (writeTLS writes it),
// before it with AsyncWritev, in order.
func (t *tlsConn) Write(p []byte) (int, error) {
	if t.onLoop.Load() {
		t.loop.records = append(t.loop.records, p...)
		return len(p), nil
	}
	if err := t.gc.AsyncWritev([][]byte{bytes.Clone(p)}, nil); err != nil {
		return 0, err
	}
	return len(p), nil
}

// feed keeps bytes that came before the session is the loop's, for the
// handshake goroutine (and, once it is done, for tlsReady), and returns how
// many are waiting.
func (t *tlsConn) feed(b []byte) int {
	t.mu.Lock()
	if t.off == len(t.in) {
		t.in, t.off = t.in[:0], 0
	}
	t.in = append(t.in, b...)
	n := len(t.in) - t.off
	t.mu.Unlock()
	t.fed.Signal()
	return n
}

// Close ends a handshake's wait; crypto/tls calls it when the handshake's
// context ends, and the server when the connection closes.
func (t *tlsConn) Close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.fed.Broadcast()
	return nil
}

func (t *tlsConn) LocalAddr() net.Addr              { return t.local }
func (t *tlsConn) RemoteAddr() net.Addr             { return t.remote }
func (t *tlsConn) SetDeadline(time.Time) error      { return nil }
func (t *tlsConn) SetReadDeadline(time.Time) error  { return nil }
func (t *tlsConn) SetWriteDeadline(time.Time) error { return nil }

// startTLS gives a new connection its TLS session and starts its
// handshake; it runs in OnOpen.
func (c *Conn) startTLS(gc gnet.Conn) {
	s := c.srv
	c.tls = newTLSConn(c, gc, s.opts.TLS)
	s.handshakes.Add(1)
	go c.handshakeLoop()
}

// handshakeLoop runs the handshake within HandshakeTimeout (a CPU-heavy,
// blocking exchange, kept off the loop), takes the identity of a verified
// client certificate, and hands the session to the loop (tlsReady), or
// closes the connection. A failure is counted (Stats.HandshakeFailures) and
// logged at most noisyLogRate a second.
func (c *Conn) handshakeLoop() {
	s, t := c.srv, c.tls
	defer s.handshakes.Done()
	ctx, cancel := context.WithTimeout(s.tlsCtx, s.opts.HandshakeTimeout)
	err := t.tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		c.reasonLogged.Store(true)
		s.handshakeFailures.Add(1)
		if ok, dropped := s.handshakeLog.allow(); ok {
			fields := []zap.Field{zap.Uint64("conn", c.id), zap.String("remote", c.remote), zap.Error(err)}
			if dropped > 0 {
				fields = append(fields, zap.Int("unloggedBefore", dropped))
			}
			s.lg.Warn("TLS handshake failed", fields...)
		}
		c.close()
		return
	}
	if !c.certificateIdentity(t.tc.ConnectionState()) {
		c.close()
		return
	}
	if err := t.gc.AsyncWritev(nil, c.tlsReady); err != nil {
		c.close()
	}
}

// tlsReady runs on the loop once the handshake is done, after its last
// records were written (gnet runs a connection's queued writes in order):
// the session becomes the loop's, and what came meanwhile is served.
func (c *Conn) tlsReady(gc gnet.Conn, err error) error {
	if err != nil {
		return nil // closed meanwhile
	}
	t := c.tls
	t.onLoop.Store(true)
	c.srv.partialBytes.Add(-t.counted) // read now: counted again as frames
	t.counted = 0
	c.framing.Store(false)
	ok := c.readTLS(time.Now())
	if ok && t.refuse {
		c.refusePartial(c.partialRequestID())
		ok = false
	}
	if c.endTraffic(gc, ok) == gnet.Close {
		_ = gc.Close()
	}
	return nil
}

// partialRequestID returns the request id of the frame in progress on a
// TLS connection, 0 when none or its header is not whole.
func (c *Conn) partialRequestID() uint64 {
	switch p := c.tls.partial; {
	case c.large != nil:
		return c.large.requestID()
	case len(p) >= protocol.HeaderSize:
		return binary.BigEndian.Uint64(p[6:14])
	}
	return 0
}

// trafficTLS takes what a socket read brought to a TLS connection: the
// handshake goroutine's while the handshake runs (counted as a partial
// frame, as it is held), the loop's afterwards. It reports false when the
// connection must be closed.
func (c *Conn) trafficTLS(gc gnet.Conn, now time.Time) bool {
	t := c.tls
	b, _ := gc.Next(-1)
	c.received.Add(int64(len(b)))
	if !t.onLoop.Load() {
		c.holdHandshake(b)
		return true
	}
	t.src = b
	ok := c.readTLS(now)
	t.src = nil
	return ok
}

// holdHandshake keeps b, which came during the handshake, for the session,
// counted in partialBytes. Past MaxPartialBytes it keeps at most one record
// more, uncounted, which names the request tlsReady refuses, and drops the
// rest: a connection cannot be answered before its handshake is done.
func (c *Conn) holdHandshake(b []byte) {
	t := c.tls
	switch {
	case t.refuse || len(b) == 0:
	case t.over == 0 && c.srv.reservePartial(int64(len(b))):
		t.counted += int64(len(b))
		t.feed(b)
	default:
		keep := min(len(b), maxRecordBytes-t.over)
		t.over += keep
		t.feed(b[:keep])
		t.refuse = keep < len(b)
	}
	c.framing.Store(true)
}

// readTLS decrypts what came, record by record into the loop's buffer,
// and serves it as readGnet serves gnet's buffer (serveFrames), until the
// session has no whole record left. A frame larger than the buffer is read
// straight into its chunks (partial.go), but for the first read of each
// chunk, which goes through the buffer so that a chunk is taken only for
// bytes that came. An incomplete small frame waits in t.partial. It reports
// false when the connection must be closed.
func (c *Conn) readTLS(now time.Time) bool {
	t, lp := c.tls, c.loop
	if lp.plain == nil {
		lp.plain = make([]byte, c.srv.opts.ReadBufferSize)
	}
	buf := lp.plain
	filled := copy(buf, t.partial)
	t.partial = t.partial[:0]
	for {
		if c.large != nil {
			var n int
			var err error
			if room := c.largeRoom(); len(room) > 0 {
				n, err = t.tc.Read(room)
				c.large.filled += n
			} else {
				n, err = t.tc.Read(buf[:min(len(buf), c.large.remaining())])
				if n > 0 && !c.fillLarge(buf[:n]) {
					c.refusePartial(c.large.requestID())
					return false
				}
			}
			if c.large.remaining() == 0 {
				if !c.serveLarge(now) {
					return false
				}
			}
			if err != nil {
				return c.readTLSEnd(err)
			}
			continue
		}
		n, err := t.tc.Read(buf[filled:])
		if n > 0 {
			filled += n
			consumed, _, ok := c.serveFrames(buf[:filled], now, nil)
			if ok {
				filled, ok = c.keepTLSPartial(buf, consumed, filled)
			}
			if !ok {
				return false
			}
		}
		if err != nil {
			if filled > 0 && c.large == nil {
				t.partial = append(t.partial, buf[:filled]...)
			}
			return c.readTLSEnd(err)
		}
	}
}

// readTLSEnd reports whether the connection stays open after the session's
// read ended with err: it does when the read only used up what came.
func (c *Conn) readTLSEnd(err error) bool {
	switch {
	case errors.Is(err, errWouldBlock):
		return true
	case errors.Is(err, io.EOF) && c.framing.Load():
		c.closeReason("closed by the client in the middle of a frame", zap.Error(err))
	case errors.Is(err, io.EOF):
		c.srv.lg.Debug("TLS session closed by the client", zap.Uint64("conn", c.id), zap.String("remote", c.remote))
	default:
		c.closeReason("TLS session failed", zap.Error(err))
	}
	return false
}

// keepTLSPartial keeps what follows the whole frames in buf[:filled]: a
// small incomplete frame moves to the front of buf, a large one into
// chunks. It returns the bytes now at the front of buf, and false when the
// connection must be closed.
func (c *Conn) keepTLSPartial(buf []byte, consumed, filled int) (int, bool) {
	rest := buf[consumed:filled]
	var requestID uint64
	if len(rest) >= protocol.HeaderSize { // its header was checked by serveFrames
		requestID = binary.BigEndian.Uint64(rest[6:14])
		if protocol.HeaderSize+int(binary.BigEndian.Uint32(rest[14:18])) > len(buf) {
			if !c.startLarge(rest) {
				c.refusePartial(requestID)
				return 0, false
			}
			return 0, true
		}
	}
	n := copy(buf, rest)
	if !c.holdSmall(n) {
		c.refusePartial(requestID)
		return 0, false
	}
	return n, true
}

// writeTLS encrypts plain into records (crypto/tls copies it) and writes
// them, with any records the session made while reading (alerts, key
// updates), to the socket with one write; gnet keeps what the socket does
// not take. It runs on the loop, after the handshake.
func (c *Conn) writeTLS(gc gnet.Conn, plain []byte) {
	t, lp := c.tls, c.loop
	if !t.onLoop.Load() {
		return // nothing is answered before the handshake is done
	}
	if len(plain) > 0 {
		// It fails only after the session failed, whose next read closes
		// the connection.
		_, _ = t.tc.Write(plain)
	}
	if len(lp.records) > 0 {
		_, _ = gc.Write(lp.records)
		if cap(lp.records) > maxSpareReplyBuffer {
			lp.records = nil
		} else {
			lp.records = lp.records[:0]
		}
	}
}

// closeNotifyTLS sends TLS's close_notify before a lingering connection
// shuts its sending side down (linger.go).
func (c *Conn) closeNotifyTLS(gc gnet.Conn) {
	if c.tls.onLoop.Load() {
		_ = c.tls.tc.CloseWrite()
		c.writeTLS(gc, nil)
	}
}

package netserver

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// acceptRetryMax bounds the pause after a failed accept (out of
// descriptors, say) before the next try.
const acceptRetryMax = time.Second

// directWriteFrames is the most requests a read may carry for the reader
// to write their replies itself (see endRead).
const directWriteFrames = 4

// tlsConn is the TLS side of a connection served without gnet: the TCP
// socket, the TLS session over it, and its writer goroutine's signals.
type tlsConn struct {
	raw        net.Conn
	sock       *tlsSocket // raw, writing without blocking (nil: raw is not a socket)
	tc         *tls.Conn
	wake       chan struct{} // capacity 1: replies wait in the reply buffer, or the socket has pending bytes
	quit       chan struct{} // closed when the reader is done: the writer returns
	writerDone chan struct{} // closed when the writer has returned
}

// wakeWriter tells the writer goroutine the reply buffer has replies.
func (t *tlsConn) wakeWriter() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// closeSocket closes the TCP socket, which ends the reader's and the
// writer's calls. It does not send TLS's close_notify: that is a write,
// which could block on a client that does not read. Any goroutine may call
// it, more than once.
func (t *tlsConn) closeSocket() { _ = t.raw.Close() }

// startTLS listens with net.Listen and starts accepting.
func (s *Server) startTLS() error {
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("netserver: listen on %s: %w", s.opts.Addr, err)
	}
	s.mu.Lock()
	s.ln, s.addr = ln, ln.Addr()
	s.mu.Unlock()
	s.tlsConns.Add(1)
	go s.acceptLoop()
	s.startSweep()
	s.lg.Info("listening", zap.Stringer("addr", ln.Addr()), zap.Bool("tls", true), zap.Bool("requireAuth", s.opts.RequireAuth))
	return nil
}

// closeTLS is Close for the TLS path: stop accepting, wait for the
// requests in flight (or ctx), then close every connection and wait for
// their goroutines. Handshakes in progress end at once.
func (s *Server) closeTLS(ctx context.Context) error {
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln == nil {
		return nil // it never listened
	}
	_ = ln.Close()
	err := s.drain(ctx)
	s.tlsCancel()
	s.live.each(func(c *Conn) { c.tls.closeSocket() })
	s.tlsConns.Wait()
	return err
}

// acceptLoop accepts TLS connections until the listener closes, each
// served by its own tlsConnLoop.
func (s *Server) acceptLoop() {
	defer s.tlsConns.Done()
	var pause time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if s.closing.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			pause = min(max(2*pause, 5*time.Millisecond), acceptRetryMax)
			s.lg.Warn("accept failed; trying again", zap.Error(err), zap.Duration("after", pause))
			select {
			case <-time.After(pause):
			case <-s.tlsCtx.Done():
				return
			}
			continue
		}
		pause = 0
		s.tlsConns.Add(1)
		go s.tlsConnLoop(nc)
	}
}

// tlsConnLoop serves one TLS connection: the handshake, then its reader
// (this goroutine, the connection's loop) and its writer (tlsWriteLoop),
// and forgets it once both are done.
func (s *Server) tlsConnLoop(nc net.Conn) {
	defer s.tlsConns.Done()
	t := &tlsConn{raw: nc, wake: make(chan struct{}, 1), quit: make(chan struct{}), writerDone: make(chan struct{})}
	c := newConnState(s, nc.RemoteAddr().String())
	c.tls = t
	var under net.Conn = nc
	if sock, err := newTLSSocket(nc, t.wakeWriter); err == nil {
		t.sock, under = sock, sock
	}
	t.tc = tls.Server(under, s.opts.TLS)
	if !s.opened(c) || !c.handshake() {
		t.closeSocket()
		c.forget(false, nil)
		return
	}
	if t.sock != nil {
		t.sock.async = true
	}
	go c.tlsWriteLoop()
	err := c.tlsReadLoop()
	linger := err == nil && c.lingerAfter
	if linger {
		_ = t.raw.SetDeadline(time.Now().Add(refuseLinger)) // ends a write blocked on the client too
	} else {
		t.closeSocket()
	}
	close(t.quit)
	<-t.writerDone
	if linger {
		c.lingerTLS()
	}
	t.closeSocket()
	c.forget(c.framing.Load(), err)
}

// handshake sets keep-alive and runs the TLS handshake, within
// HandshakeTimeout, and takes the identity of a verified client
// certificate. It reports false (the reason logged) when the connection
// must be closed. Failed handshakes are logged at most noisyLogRate a
// second.
func (c *Conn) handshake() bool {
	s, t := c.srv, c.tls
	if tc, ok := t.raw.(*net.TCPConn); ok {
		d := s.opts.TCPKeepAlive
		_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: d > 0, Idle: max(d, time.Second),
			Interval: max(d/5, time.Second), Count: 5})
	}
	_ = t.raw.SetDeadline(time.Now().Add(s.opts.HandshakeTimeout))
	if err := t.tc.HandshakeContext(s.tlsCtx); err != nil {
		c.reasonLogged.Store(true)
		s.handshakeFailures.Add(1)
		if ok, dropped := s.handshakeLog.allow(); ok {
			fields := []zap.Field{zap.Uint64("conn", c.id), zap.String("remote", c.remote), zap.Error(err)}
			if dropped > 0 {
				fields = append(fields, zap.Int("unloggedBefore", dropped))
			}
			s.lg.Warn("TLS handshake failed", fields...)
		}
		return false
	}
	_ = t.raw.SetDeadline(time.Time{})
	return c.certificateIdentity(t.tc.ConnectionState())
}

// tlsReadLoop is a TLS connection's loop: it reads, serves what it read
// (serveFrames, as gnet's OnTraffic does) and hands the replies made on
// the loop to the writer, until the connection closes. It returns the read's error, or
// nil when the server closes the connection (the reason logged).
//
// A read returns at most one TLS record (16 KiB of plaintext). A frame
// larger than the read buffer is read straight into its chunks
// (partial.go), but for the first read of each chunk, which goes through
// the read buffer so that a chunk is taken only for bytes that came.
func (c *Conn) tlsReadLoop() error {
	t := c.tls
	buf := make([]byte, c.srv.opts.ReadBufferSize)
	filled := 0
	for {
		if c.large != nil {
			// Into the last chunk's free part; a new chunk is taken (and
			// counted) only once bytes for it have come, read into buf.
			var n int
			var err error
			if room := c.largeRoom(); len(room) > 0 {
				n, err = t.tc.Read(room)
				c.large.filled += n
			} else {
				n, err = t.tc.Read(buf[:min(len(buf), c.large.remaining())])
				if !c.fillLarge(buf[:n]) {
					c.refusePartial(c.large.requestID())
					c.endRead(0)
					return nil
				}
			}
			c.received.Add(int64(n))
			if c.large.remaining() == 0 {
				_, _, ok := c.serveFrames(c.takeLarge(), time.Now(), true)
				c.endRead(1)
				if !ok {
					return nil
				}
			}
			if err != nil {
				return err
			}
			continue
		}
		n, err := t.tc.Read(buf[filled:])
		if n > 0 {
			c.received.Add(int64(n))
			filled += n
			consumed, frames, ok := c.serveFrames(buf[:filled], time.Now(), false)
			if ok {
				filled, ok = c.keepTLSPartial(buf, consumed, filled)
			}
			c.endRead(frames)
			if !ok {
				return nil
			}
		}
		if err != nil {
			return err
		}
	}
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

// endRead sends the replies made on the loop during a read that carried
// frames requests, then runs the work inline handlers left for after that
// (AfterWrite). A read of a few requests, with nothing waiting for the
// writer goroutine, is answered by the reader itself: a request-at-a-time
// client gets its answer without a hand-off between goroutines (which
// wakes a second thread, often on another CPU). Otherwise the replies go
// to the writer, which writes them with those of other reads and of
// handlers, in parallel with the reader. Either way the reader never
// blocks on a client that does not read: its socket's writes never wait
// (tlsSocket), and the unsent replies, the loop's included, are bounded by
// MaxOutboundBytes.
func (c *Conn) endRead(frames int) {
	if len(c.loopOut) > 0 {
		if frames <= directWriteFrames && c.tls.sock != nil && c.writerIdle() {
			c.writeLoopOut()
		} else {
			c.handLoopOut()
		}
	}
	if len(c.afterWrite) > 0 {
		c.runAfterWrites()
	}
}

// writerIdle reports whether nothing waits for the writer goroutine.
func (c *Conn) writerIdle() bool {
	c.outMu.Lock()
	idle := len(c.out) == 0 && !c.flushQueued
	c.outMu.Unlock()
	return idle
}

// writeLoopOut writes the loop buffer from the reader (without blocking:
// what the socket does not take waits in tlsSocket for the writer).
func (c *Conn) writeLoopOut() {
	err := c.tlsWrite(c.loopOut)
	c.resetLoopOut()
	switch n := c.tls.sock.unsent(); {
	case err != nil:
		c.tls.closeSocket()
	case n > c.srv.opts.MaxOutboundBytes:
		c.closeWithReason("unsent replies over MaxOutboundBytes (the client does not read)",
			zap.Int("unsent", n), zap.Int("limit", c.srv.opts.MaxOutboundBytes))
	}
}

// maxTLSRecord is the most plaintext crypto/tls puts in one record.
const maxTLSRecord = 16 << 10

// tlsWrite writes buf through the TLS session; the records of a buffer
// larger than one record go to the socket with one write (tlsSocket.gather).
func (c *Conn) tlsWrite(buf []byte) error {
	sock := c.tls.sock
	if sock == nil || len(buf) <= maxTLSRecord {
		_, err := c.tls.tc.Write(buf)
		return err
	}
	sock.gather()
	_, err := c.tls.tc.Write(buf)
	if rerr := sock.release(); err == nil {
		err = rerr
	}
	return err
}

// handLoopOut moves the loop buffer into the reply buffer (a swap when the
// reply buffer is empty) and wakes the writer, or closes the connection
// when its unsent replies pass MaxOutboundBytes.
func (c *Conn) handLoopOut() {
	c.outMu.Lock()
	if c.closed {
		c.outMu.Unlock()
		c.resetLoopOut()
		return
	}
	if len(c.out) == 0 {
		c.out, c.loopOut = c.loopOut, c.out[:0]
	} else {
		c.out = append(c.out, c.loopOut...)
		c.resetLoopOut()
	}
	n := len(c.out)
	if c.tls.sock != nil {
		n += c.tls.sock.unsent()
	}
	over := n > c.srv.opts.MaxOutboundBytes
	queue := !over && !c.flushQueued
	if queue {
		c.flushQueued = true
	}
	c.outMu.Unlock()
	switch {
	case over:
		c.closeWithReason("unsent replies over MaxOutboundBytes (the client does not read)",
			zap.Int("unsent", n), zap.Int("limit", c.srv.opts.MaxOutboundBytes))
	case queue:
		c.tls.wakeWriter()
	}
}

// tlsWriteLoop writes the reply buffer (many replies, one write), woken by
// queueFlush and endRead, until the reader is done. It is the only
// goroutine that writes to the socket.
func (c *Conn) tlsWriteLoop() {
	t := c.tls
	defer close(t.writerDone)
	for {
		select {
		case <-t.wake:
		case <-t.quit:
			return
		}
		if !c.flushTLS() {
			return
		}
	}
}

// flushTLS is flush for a TLS connection, on its writer goroutine: it
// writes the whole reply buffer with one write, releases the written
// requests from the busy count (as gnet's flush does once gnet has the
// bytes: a client that stops reading then counts as idle, not busy), then
// waits until the socket has taken every pending byte, the reader's too.
// It reports false once the connection is closed.
func (c *Conn) flushTLS() bool {
	c.outMu.Lock()
	if c.closed {
		c.outMu.Unlock()
		return false
	}
	buf, written := c.out, c.unwritten
	c.out, c.outSpare, c.unwritten = c.outSpare[:0], nil, 0
	c.flushQueued = false
	closeAfter := c.closeAfter
	c.outMu.Unlock()
	var err error
	if len(buf) > 0 {
		err = c.tlsWrite(buf)
	}
	c.held.Add(-int64(written))
	c.srv.busy.Add(-int64(written))
	if err == nil && c.tls.sock != nil {
		err = c.tls.sock.flushPending()
	}
	if cap(buf) <= maxSpareReplyBuffer {
		c.outMu.Lock()
		if c.outSpare == nil {
			c.outSpare = buf[:0]
		}
		c.outMu.Unlock()
	}
	switch {
	case err != nil:
		c.tls.closeSocket()
		return false
	case closeAfter != "":
		c.closeWithReason(closeAfter)
		return false
	}
	return true
}

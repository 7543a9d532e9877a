package netserver

import (
	"errors"
	"net"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// tlsSocket is the TCP connection under a TLS session, made to write the
// way gnet does: a write never blocks its caller. It writes what the
// socket takes at once (a non-blocking write(2)) and keeps the rest, in
// order, for the connection's writer goroutine to write (flushPending),
// which waits for the socket as long as it must. So neither the reader (the
// connection's loop) nor the writer's turn at the reply buffer ever waits
// on a client that does not read; what it has not taken counts toward
// MaxOutboundBytes.
type tlsSocket struct {
	net.Conn // reads, deadlines, Close, blocking writes of the pending bytes
	rc       syscall.RawConn
	wake     func() // tells the writer goroutine pending has bytes
	// async is set once the handshake is done and the writer goroutine
	// runs; until then writes block (the handshake's own messages must
	// reach the client before it answers, and nobody else would write
	// what the socket did not take). Set before the writer starts.
	async bool

	mu       sync.Mutex
	pending  []byte // bytes the socket has not taken, to write before any other
	spare    []byte
	flushing bool  // the writer goroutine is writing pending bytes
	err      error // the first write error; every write fails after it

	// gathering: writes collect in gathered until release writes them
	// all (see gather).
	gathering bool
	gathered  []byte
	syscalls  int64 // write(2) calls (tests)
}

// errNoRawConn: the connection is not a socket (only in tests).
var errNoRawConn = errors.New("netserver: the connection has no descriptor")

func newTLSSocket(nc net.Conn, wake func()) (*tlsSocket, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil, errNoRawConn
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &tlsSocket{Conn: nc, rc: rc, wake: wake}, nil
}

// Write takes all of p: written to the socket as far as it takes it now,
// the rest kept for flushPending. It fails only after a write failed.
// During the handshake it writes as net.Conn does.
func (s *tlsSocket) Write(p []byte) (int, error) {
	if !s.async {
		return s.Conn.Write(p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	if s.gathering {
		s.gathered = append(s.gathered, p...)
		return len(p), nil
	}
	return s.writeLocked(p)
}

// writeLocked is Write's work, with s.mu held.
func (s *tlsSocket) writeLocked(p []byte) (int, error) {
	n := len(p)
	if len(s.pending) == 0 && !s.flushing {
		var err error
		p, err = s.writeNow(p)
		if err != nil {
			s.err = err
			return 0, err
		}
		if len(p) == 0 {
			return n, nil
		}
	}
	wake := len(s.pending) == 0 && !s.flushing
	s.pending = append(s.pending, p...)
	if wake {
		s.wake()
	}
	return n, nil
}

// gather makes the writes that follow collect in one buffer until
// release, which writes them with one write(2). crypto/tls writes each
// record (16 KiB of plaintext at most) with a write of its own, so a flush
// of a large reply buffer (a pull's answer) took one system call per
// record; gathered, it takes one, at the price of copying the ciphertext.
// Writes of other goroutines meanwhile (the reader's direct replies) join
// the buffer in the order they come, which is the records' order.
func (s *tlsSocket) gather() {
	s.mu.Lock()
	s.gathering = true
	s.mu.Unlock()
}

// release ends gather: it writes what was gathered as Write would, under
// the same lock, so no write can pass it.
func (s *tlsSocket) release() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gathering = false
	p := s.gathered
	s.gathered = nil
	var err error
	switch {
	case s.err != nil:
		err = s.err
	case len(p) > 0:
		_, err = s.writeLocked(p)
	}
	if cap(p) <= maxSpareReplyBuffer {
		s.gathered = p[:0] // writeLocked kept a copy of what the socket did not take
	}
	return err
}

// writeNow writes p with non-blocking write(2)s until the socket takes no
// more, and returns what it did not take.
func (s *tlsSocket) writeNow(p []byte) ([]byte, error) {
	var werr error
	err := s.rc.Write(func(fd uintptr) bool {
		for len(p) > 0 {
			s.syscalls++
			n, err := unix.Write(int(fd), p)
			if n > 0 {
				p = p[n:]
			}
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				return true
			case err != nil:
				werr = err
				return true
			}
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return p, err
}

// unsent returns the bytes written but not yet taken by the socket.
func (s *tlsSocket) unsent() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// flushPending writes the pending bytes, waiting for the socket, until
// none are left; writes made meanwhile queue behind them. Only the writer
// goroutine calls it.
func (s *tlsSocket) flushPending() error {
	for {
		s.mu.Lock()
		if s.err != nil || len(s.pending) == 0 {
			s.flushing = false
			err := s.err
			s.mu.Unlock()
			return err
		}
		buf := s.pending
		s.pending, s.spare = s.spare[:0], nil
		s.flushing = true
		s.mu.Unlock()

		_, err := s.Conn.Write(buf)

		s.mu.Lock()
		if err != nil && s.err == nil {
			s.err = err
		}
		if s.spare == nil && cap(buf) <= maxSpareReplyBuffer {
			s.spare = buf[:0]
		}
		s.mu.Unlock()
	}
}

package transport

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// silentServer accepts connections and never reads or writes them: a
// server cut off without a reset, as the client sees it.
type silentServer struct {
	ln       net.Listener
	accepted atomic.Int32
	mu       sync.Mutex
	conns    []net.Conn
	wg       sync.WaitGroup
}

func (s *silentServer) addr() string { return s.ln.Addr().String() }

func startSilentServer(t *testing.T) *silentServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			s.mu.Lock()
			s.conns = append(s.conns, nc)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.wg.Wait()
		s.mu.Lock()
		for _, nc := range s.conns {
			_ = nc.Close()
		}
		s.mu.Unlock()
	})
	return s
}

// cutProxy forwards connections to a target until cut. A cut drops every
// byte in both directions without closing anything, as a network that
// stops carrying packets does; after heal, connections made since then
// are forwarded again, and the ones open before stay cut (their bytes
// were lost: TCP would resend them only after its backed-off
// retransmission timeout).
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	epoch  int
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, nc := range p.conns {
			_ = nc.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

// setCut cuts (true) or heals (false) the link.
func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut && !cut {
		p.epoch++
	}
	p.cut = cut
}

// forwards reports whether bytes of a connection made in epoch get
// through.
func (p *cutProxy) forwards(epoch int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.cut && epoch == p.epoch
}

func (p *cutProxy) acceptLoop() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		epoch := p.epoch
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipeLoop(client, server, epoch)
		go p.pipeLoop(server, client, epoch)
	}
}

// pipeLoop copies from src to dst while the link carries the connection's
// bytes, and drops them otherwise.
func (p *cutProxy) pipeLoop(src, dst net.Conn, epoch int) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && p.forwards(epoch) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				_ = dst.Close()
			}
			return
		}
	}
}

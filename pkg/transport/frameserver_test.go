package transport

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// frameServer is a small server of the frame protocol on a crypto/tls (or
// plain) listener, a goroutine per connection: it answers CmdPing with the
// request's body and, when it has identities (an empty map: certificates
// only), CmdAuth, refusing every other request until the connection
// authenticated or presented a client certificate.
type frameServer struct {
	ln         net.Listener
	identities map[string]string // name → secret; nil: no authentication
	silent     bool              // never read or answer (startSilentServer)

	accepted     atomic.Int32
	authAttempts atomic.Int32
	mu           sync.Mutex
	firstCmds    []protocol.Command // the first command of each connection
	clientURIs   []string           // URI SANs of verified client certificates
	conns        []net.Conn
	wg           sync.WaitGroup
}

func startFrameServer(t *testing.T, cfg *tls.Config, identities map[string]string) *frameServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	s := &frameServer{ln: ln, identities: identities}
	s.wg.Add(1)
	go s.acceptLoop()
	t.Cleanup(s.close)
	return s
}

func (s *frameServer) addr() string { return s.ln.Addr().String() }

func (s *frameServer) close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for _, nc := range s.conns {
		_ = nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *frameServer) acceptLoop() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.accepted.Add(1)
		s.mu.Lock()
		s.conns = append(s.conns, nc)
		s.mu.Unlock()
		if !s.silent {
			s.wg.Add(1)
			go s.serveLoop(nc)
		}
	}
}

func (s *frameServer) serveLoop(nc net.Conn) {
	defer s.wg.Done()
	defer nc.Close()
	authed := s.identities == nil
	if tc, ok := nc.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			return
		}
		if chains := tc.ConnectionState().VerifiedChains; len(chains) > 0 {
			authed = true
			s.mu.Lock()
			for _, u := range chains[0][0].URIs {
				s.clientURIs = append(s.clientURIs, u.String())
			}
			s.mu.Unlock()
		}
	}
	br := bufio.NewReader(nc)
	first := true
	for {
		hdr := make([]byte, protocol.HeaderSize)
		if _, err := io.ReadFull(br, hdr); err != nil {
			return
		}
		h, err := protocol.ParseHeader(hdr, 0)
		if err != nil {
			return
		}
		body := make([]byte, h.BodyLen)
		if _, err := io.ReadFull(br, body); err != nil {
			return
		}
		if first {
			first = false
			s.mu.Lock()
			s.firstCmds = append(s.firstCmds, h.Command())
			s.mu.Unlock()
		}
		status, resp := s.handle(h.Command(), body, &authed)
		if _, err := nc.Write(protocol.AppendResponse(nil, status, h.RequestID, resp)); err != nil {
			return
		}
	}
}

func (s *frameServer) handle(cmd protocol.Command, body []byte, authed *bool) (protocol.Status, []byte) {
	switch {
	case cmd == protocol.CmdAuth && s.identities == nil:
		return protocol.StatusUnknownCommand, nil // a server that predates authentication
	case cmd == protocol.CmdAuth:
		s.authAttempts.Add(1)
		q, err := protocol.DecodeAuthRequest(body)
		if err != nil {
			return protocol.StatusBadRequest, []byte(err.Error())
		}
		if secret, ok := s.identities[q.Name]; !ok || secret != q.Secret {
			return protocol.StatusUnauthenticated, []byte("unknown identity or wrong secret")
		}
		*authed = true
		return protocol.StatusOK, protocol.AppendAuthResponse(nil, &protocol.AuthResponse{Name: q.Name, Kind: 1})
	case !*authed:
		return protocol.StatusUnauthenticated, []byte("authenticate first")
	case cmd == protocol.CmdPing:
		return protocol.StatusOK, body
	}
	return protocol.StatusUnknownCommand, nil
}

func (s *frameServer) firstCommands() []protocol.Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]protocol.Command(nil), s.firstCmds...)
}

// startSilentServer starts a server that accepts connections and never
// reads or writes them: a server cut off without a reset, as the client
// sees it.
func startSilentServer(t *testing.T) *frameServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &frameServer{ln: ln, silent: true}
	s.wg.Add(1)
	go s.acceptLoop()
	t.Cleanup(s.close)
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

// Package tlstest gives tests a throw-away certificate authority and a TLS
// front for a plaintext server of the frame protocol, so clients can be
// tested with TLS and credentials against any server a test already runs.
package tlstest

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/pkg/tlsconfig/pki"
)

// PKI is a CA in a test's temporary directory (ca.pem) with a server
// certificate for 127.0.0.1 and localhost (server.pem, server-key.pem).
type PKI struct {
	t      testing.TB
	Dir    string
	CA     *pki.CA
	Server tlsconfig.Files // the server certificate, with the CA
}

// New makes a PKI.
func New(t testing.TB) *PKI {
	t.Helper()
	ca, err := pki.NewCA("test CA", 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &PKI{t: t, Dir: t.TempDir(), CA: ca}
	p.write("ca.pem", ca.CertPEM, 0o644)
	p.Server = p.Issue("server", pki.Leaf{Hosts: []string{"127.0.0.1", "localhost"}, Server: true})
	return p
}

func (p *PKI) write(name string, data []byte, perm os.FileMode) string {
	p.t.Helper()
	path := filepath.Join(p.Dir, name)
	if err := pki.WriteFile(path, data, perm); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// Issue writes base.pem and base-key.pem for l, signed by the CA, and
// returns them with the CA file.
func (p *PKI) Issue(base string, l pki.Leaf) tlsconfig.Files {
	p.t.Helper()
	cert, key, err := p.CA.Issue(l)
	if err != nil {
		p.t.Fatal(err)
	}
	keyPath := p.write(base+"-key.pem", key, 0o600)
	return tlsconfig.Files{CA: filepath.Join(p.Dir, "ca.pem"), Cert: p.write(base+".pem", cert, 0o644), Key: keyPath}
}

// Client issues a client certificate naming the identity (kind, name).
func (p *PKI) Client(kind auth.Kind, name string) tlsconfig.Files {
	p.t.Helper()
	return p.Issue(kind.String()+"-"+name, pki.Leaf{Identity: auth.IdentityURI(kind, name), Client: true})
}

// ServerConfig returns the server's TLS config (client certificates
// verified when given).
func (p *PKI) ServerConfig() *tls.Config {
	p.t.Helper()
	cfg, err := tlsconfig.Server(p.Server, false)
	if err != nil {
		p.t.Fatal(err)
	}
	return cfg
}

// ClientConfig returns a client's TLS config that trusts the CA and, when
// files name a certificate, presents it.
func (p *PKI) ClientConfig(files tlsconfig.Files) *tls.Config {
	p.t.Helper()
	files.CA = filepath.Join(p.Dir, "ca.pem")
	cfg, err := tlsconfig.Client(files, "")
	if err != nil {
		p.t.Fatal(err)
	}
	return cfg
}

// Front is a TLS listener in front of a plaintext server: it completes the
// handshake, authenticates the connection (a verified client certificate,
// or a CmdAuth first request whose name and secret it knows; nil
// identities: no authentication) and then relays bytes both ways to a new
// connection to the server. A connection whose first request is not a
// good CmdAuth is answered StatusUnauthenticated and closed.
type Front struct {
	Addr string
	// Counts of connections: accepted, authenticated by secret or by
	// certificate, refused.
	Accepted, BySecret, ByCertificate, Refused atomic.Int32

	ln         net.Listener
	target     string
	identities map[string]string
	mu         sync.Mutex
	conns      []net.Conn
	wg         sync.WaitGroup
}

// StartFront starts a Front for target; the test's cleanup stops it.
func StartFront(t testing.TB, target string, cfg *tls.Config, identities map[string]string) *Front {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &Front{Addr: ln.Addr().String(), ln: ln, target: target, identities: identities}
	f.wg.Add(1)
	go f.acceptLoop()
	t.Cleanup(f.close)
	return f
}

func (f *Front) close() {
	_ = f.ln.Close()
	f.mu.Lock()
	for _, nc := range f.conns {
		_ = nc.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// track remembers nc, to close it when the Front closes.
func (f *Front) track(nc net.Conn) {
	f.mu.Lock()
	f.conns = append(f.conns, nc)
	f.mu.Unlock()
}

func (f *Front) acceptLoop() {
	defer f.wg.Done()
	for {
		nc, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.Accepted.Add(1)
		f.track(nc)
		f.wg.Add(1)
		go f.serveLoop(nc.(*tls.Conn))
	}
}

func (f *Front) serveLoop(tc *tls.Conn) {
	defer f.wg.Done()
	defer tc.Close()
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		return
	}
	br := bufio.NewReader(tc)
	switch {
	case f.identities == nil:
	case len(tc.ConnectionState().VerifiedChains) > 0:
		f.ByCertificate.Add(1)
	case !f.authenticate(tc, br):
		f.Refused.Add(1)
		return
	default:
		f.BySecret.Add(1)
	}
	_ = tc.SetDeadline(time.Time{})
	up, err := net.Dial("tcp", f.target)
	if err != nil {
		return
	}
	f.track(up)
	defer up.Close()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		_, _ = io.Copy(tc, up)
		_ = tc.Close()
	}()
	_, _ = io.Copy(up, br)
}

// authenticate reads the first request and answers it: true when it is a
// CmdAuth with a known name and its secret.
func (f *Front) authenticate(tc *tls.Conn, br *bufio.Reader) bool {
	hdr := make([]byte, protocol.HeaderSize)
	if _, err := io.ReadFull(br, hdr); err != nil {
		return false
	}
	h, err := protocol.ParseHeader(hdr, 0)
	if err != nil {
		return false
	}
	body := make([]byte, h.BodyLen)
	if _, err := io.ReadFull(br, body); err != nil {
		return false
	}
	refuse := func(msg string) bool {
		_, _ = tc.Write(protocol.AppendResponse(nil, protocol.StatusUnauthenticated, h.RequestID, []byte(msg)))
		return false
	}
	if h.Command() != protocol.CmdAuth {
		return refuse("authenticate first")
	}
	q, err := protocol.DecodeAuthRequest(body)
	if err != nil {
		return refuse(err.Error())
	}
	if secret, ok := f.identities[q.Name]; !ok || secret != q.Secret {
		return refuse("unknown identity or wrong secret")
	}
	resp := protocol.AppendAuthResponse(nil, &protocol.AuthResponse{Name: q.Name, Kind: uint8(auth.KindApp)})
	_, err = tc.Write(protocol.AppendResponse(nil, protocol.StatusOK, h.RequestID, resp))
	return err == nil
}

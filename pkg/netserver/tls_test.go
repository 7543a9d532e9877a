package netserver

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// TestTLS_SameAsPlaintext runs the plaintext path's tests over TLS: the
// framing, every reply style (Reply, ReplyRetained, ReplyAppend, inline,
// Detach, AfterWrite), the limits, bad input, panics and the drain on
// Close behave the same.
func TestTLS_SameAsPlaintext(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"Framing_SplitAtEveryByte", TestServer_Framing_SplitAtEveryByte},
		{"Framing_ByteByByte", TestServer_Framing_ByteByByte},
		{"Framing_ManyFramesPerRead", TestServer_Framing_ManyFramesPerRead},
		{"LargeFrameAcrossReads", TestServer_LargeFrameAcrossReads},
		{"UnknownCommand_KeepsConnection", TestServer_UnknownCommand_KeepsConnection},
		{"BadInput_BadMagic", TestServer_BadInput_BadMagic},
		{"BadInput_UnknownVersion", TestServer_BadInput_UnknownVersion},
		{"BadInput_UnknownFlags", TestServer_BadInput_UnknownFlags},
		{"BadInput_OversizedLength", TestServer_BadInput_OversizedLength},
		{"BadInput_ResponseFrame", TestServer_BadInput_ResponseFrame},
		{"BadInput_RandomBytes", TestServer_BadInput_RandomBytes},
		{"BadInput_TruncatedFrameThenClose", TestServer_BadInput_TruncatedFrameThenClose},
		{"BadInput_ClientNeverReads", TestServer_BadInput_ClientNeverReads},
		{"BadInput_FloodWithoutReading", TestServer_BadInput_FloodWithoutReading},
		{"MaxConns", TestServer_MaxConns},
		{"MaxInFlight_Busy", TestServer_MaxInFlight_Busy},
		{"OneWay_NoReply", TestServer_OneWay_NoReply},
		{"ReplyLater_MultipleSlices_OnlyFirstCounts", TestRequest_ReplyLater_MultipleSlices_OnlyFirstCounts},
		{"Done_ClosedWhenClientLeaves", TestRequest_Done_ClosedWhenClientLeaves},
		{"Close_DrainsInFlight", TestServer_Close_DrainsInFlight},
		{"Close_DeadlineWithStuckRequest", TestServer_Close_DeadlineWithStuckRequest},
		{"ManyClientsConcurrently", TestServer_ManyClientsConcurrently},
		{"Mux_InlineHandlers", TestMux_InlineHandlers},
		{"HandlerPanic_AnsweredInternal", TestServer_HandlerPanic_AnsweredInternal},
		{"ReplyRetained_WritesBodiesInPlace", TestRequest_ReplyRetained_WritesBodiesInPlace},
		{"ReplyRetained_ReleasedWhenDropped", TestRequest_ReplyRetained_ReleasedWhenDropped},
		{"ReplyRetained_ReleasedOnClose", TestRequest_ReplyRetained_ReleasedOnClose},
		{"ReplyAppend", TestRequest_ReplyAppend},
		{"DetachAnswersLater", TestRequest_DetachAnswersLater},
		{"AfterWrite_RunsOnceTheReplyIsWritten", TestRequest_AfterWrite_RunsOnceTheReplyIsWritten},
		{"AfterWrite_OffLoopAndPanics", TestRequest_AfterWrite_OffLoopAndPanics},
		{"ServeWorkers_OneConnDoesNotBlockAnother", TestServer_ServeWorkers_OneConnDoesNotBlockAnother},
		{"ReleaseLargeBody", TestRequest_ReleaseLargeBody},
		{"DetachThenRelease", TestRequest_DetachThenRelease},
	} {
		t.Run(tc.name, func(t *testing.T) {
			useTLS(t)
			tc.test(t)
		})
	}
}

// tlsAuthServer starts a TLS server that requires authentication against
// the tests' policy, answering CmdSend with the principal (whoami).
func tlsAuthServer(t *testing.T, opts Options, before ...func(*Server)) (*testServer, *auth.Authority, *whoami) {
	a := auth.NewAuthority(testEntries(t, 1, billingGrants, false))
	w := newWhoami()
	opts.Auth, opts.RequireAuth = a, true
	return startServer(t, opts, w.mux, append([]func(*Server){withTLS(t)}, before...)...), a, w
}

// failsCleanly checks that a client whose handshake the server refuses
// gets an error (at the handshake, or at its first exchange: with TLS 1.3
// a client learns that its certificate was refused only then).
func failsCleanly(t *testing.T, s *testServer, cfg *tls.Config) {
	t.Helper()
	c, err := tryDialTLS(s, cfg)
	if err != nil {
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(protocol.AppendRequest(nil, protocol.CmdPing, 1, nil)); err != nil {
		return
	}
	if f, err := c.tryReadFrame(5 * time.Second); err == nil {
		t.Fatalf("a refused handshake was served: %+v", f.Header)
	} else if ne := (net.Error)(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("a refused handshake left the client waiting")
	}
}

func TestTLS_HandshakeFailuresAreClean(t *testing.T) {
	s, _, _ := tlsAuthServer(t, Options{HandshakeTimeout: 300 * time.Millisecond})
	good := dialTLS(t, s, clientTLS(t, clientCert(t, auth.KindApp, "billing")))

	expired := pkiCA.issue(t, certSpec{uris: []*url.URL{auth.IdentityURI(auth.KindApp, "billing")},
		notAfter: time.Now().Add(-time.Minute)})
	strange := pkiOther.issue(t, certSpec{uris: []*url.URL{auth.IdentityURI(auth.KindApp, "billing")}})
	// A client picks a certificate the server's CA list admits; these
	// clients send theirs anyway.
	presenting := func(cert tls.Certificate) *tls.Config {
		cfg := clientTLS(t)
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
		return cfg
	}
	cases := []struct {
		name string
		try  func(t *testing.T)
	}{
		{"client certificate of an unknown CA", func(t *testing.T) { failsCleanly(t, s, presenting(strange)) }},
		{"expired client certificate", func(t *testing.T) { failsCleanly(t, s, presenting(expired)) }},
		{"client that does not trust the server", func(t *testing.T) {
			if c, err := tryDialTLS(s, &tls.Config{RootCAs: pkiOther.pool}); err == nil {
				c.Close()
				t.Fatal("a client trusting another CA completed the handshake")
			}
		}},
		{"plaintext client", func(t *testing.T) {
			nc, err := net.Dial("tcp", s.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			_, _ = nc.Write(protocol.AppendRequest(nil, protocol.CmdPing, 1, []byte("hello")))
			c := &rawConn{Conn: nc, br: bufio.NewReader(nc)}
			if f, err := c.tryReadFrame(5 * time.Second); err == nil {
				t.Fatalf("a plaintext client was answered %+v", f.Header)
			}
			c.waitClosed(t)
		}},
		{"handshake never started", func(t *testing.T) {
			nc, err := net.Dial("tcp", s.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			start := time.Now()
			(&rawConn{Conn: nc, br: bufio.NewReader(nc)}).waitClosed(t)
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("a silent client was closed after %v (HandshakeTimeout 300ms)", d)
			}
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.try(t)
			waitFor(t, 5*time.Second, "the failure counted", func() bool { return s.Stats().HandshakeFailures >= uint64(i+1) })
			// The server keeps serving the others.
			if f := good.request(t, protocol.CmdSend, uint64(i+1), []byte("order.x")); string(f.Body) != "app:billing" {
				t.Fatalf("the good client got %v %q", f.Header.Status(), f.Body)
			}
		})
	}
	if s.logs.FilterMessage("TLS handshake failed").Len() == 0 {
		t.Fatal("handshake failures not logged")
	}
	waitFor(t, 5*time.Second, "failed handshakes forgotten", func() bool { return s.Stats().Conns == 1 })
}

func TestTLS_HandshakeFailureLogIsRateLimited(t *testing.T) {
	s := startServer(t, Options{}, NewMux(), withTLS(t))
	const n = 30
	for range n {
		nc, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = nc.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
		(&rawConn{Conn: nc, br: bufio.NewReader(nc)}).waitClosed(t)
		nc.Close()
	}
	waitFor(t, 5*time.Second, "every failure counted", func() bool { return s.Stats().HandshakeFailures == n })
	if lines := s.logs.FilterMessage("TLS handshake failed").Len(); lines > noisyLogBurst+3 {
		t.Fatalf("%d failed handshakes logged %d lines", n, lines)
	}
	ping(t, s)
}

func TestTLS_ClientHelloOnPlaintextPort(t *testing.T) {
	s := startServer(t, Options{}, NewMux())
	if c, err := tryDialTLS(s, clientTLS(t)); err == nil {
		c.Close()
		t.Fatal("a TLS handshake succeeded on a plaintext port")
	}
	s.waitLog(t, "TLS handshake on a plaintext port")
	ping(t, s)
}

func TestTLS_CertificateIdentity(t *testing.T) {
	s, _, w := tlsAuthServer(t, Options{})
	byCert := dialTLS(t, s, clientTLS(t, clientCert(t, auth.KindApp, "billing")))
	if f := byCert.request(t, protocol.CmdSend, 1, []byte("order.x")); f.Header.Status() != protocol.StatusOK || string(f.Body) != "app:billing" {
		t.Fatalf("a certificate client got %v %q", f.Header.Status(), f.Body)
	}
	broker := dialTLS(t, s, clientTLS(t, clientCert(t, auth.KindBroker, "rt1")))
	if f := broker.request(t, protocol.CmdSend, 1, []byte("anything")); string(f.Body) != "broker:rt1" {
		t.Fatalf("a broker certificate client got %v %q", f.Header.Status(), f.Body)
	}

	// No certificate, or one that names no identity: unauthenticated until
	// CmdAuth.
	noName := pkiCA.issue(t, certSpec{})
	for _, cfg := range []*tls.Config{clientTLS(t), clientTLS(t, noName)} {
		c := dialTLS(t, s, cfg)
		served := w.served.Load()
		if f := c.request(t, protocol.CmdSend, 1, []byte("order.x")); f.Header.Status() != protocol.StatusUnauthenticated {
			t.Fatalf("a client without an identity got %v", f.Header.Status())
		}
		if w.served.Load() != served {
			t.Fatal("the handler saw an unauthenticated request")
		}
		c.login(t, 2, "billing", billingSecret, protocol.StatusOK)
		if f := c.request(t, protocol.CmdSend, 3, []byte("order.x")); string(f.Body) != "app:billing" {
			t.Fatalf("after CmdAuth got %v %q", f.Header.Status(), f.Body)
		}
	}
}

func TestTLS_MaxConnsPerIdentity_ByCertificate(t *testing.T) {
	s, _, _ := tlsAuthServer(t, Options{MaxConnsPerIdentity: 1})
	cfg := clientTLS(t, clientCert(t, auth.KindApp, "billing"))
	first := dialTLS(t, s, cfg)
	if f := first.request(t, protocol.CmdSend, 1, []byte("order.x")); f.Header.Status() != protocol.StatusOK {
		t.Fatalf("first connection got %v", f.Header.Status())
	}
	failsCleanly(t, s, cfg)
	s.waitLog(t, "over MaxConnsPerIdentity")
	first.Close()
	waitFor(t, 5*time.Second, "a free slot", func() bool {
		c, err := tryDialTLS(s, cfg)
		if err != nil {
			return false
		}
		defer c.Close()
		c.send(t, protocol.AppendRequest(nil, protocol.CmdSend, 2, []byte("order.x")))
		f, err := c.tryReadFrame(2 * time.Second)
		return err == nil && f.Header.Status() == protocol.StatusOK
	})
}

// The server takes its config's certificate at each handshake: a
// certificate swapped in GetCertificate (a reload) serves the next
// connection, without a restart.
func TestTLS_CertificateReload(t *testing.T) {
	testPKI(t)
	var current atomic.Pointer[tls.Certificate]
	current.Store(&pkiServer)
	cfg := &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return current.Load(), nil }}
	s := startServer(t, Options{}, NewMux(), func(s *Server) { s.opts.TLS = cfg })
	old := dialTLS(t, s, clientTLS(t))
	if f := old.request(t, protocol.CmdPing, 1, []byte("a")); f.Header.Status() != protocol.StatusOK {
		t.Fatal("ping over the first certificate")
	}
	renewed := pkiOther.issue(t, certSpec{ips: []net.IP{net.IPv4(127, 0, 0, 1)}, server: true})
	current.Store(&renewed)
	c := dialTLS(t, s, &tls.Config{RootCAs: pkiOther.pool})
	if f := c.request(t, protocol.CmdPing, 1, []byte("b")); f.Header.Status() != protocol.StatusOK {
		t.Fatal("ping over the renewed certificate")
	}
	if _, err := tryDialTLS(s, clientTLS(t)); err == nil {
		t.Fatal("a client trusting only the old CA accepted the renewed certificate")
	}
	// The connection made before the reload keeps working.
	if f := old.request(t, protocol.CmdPing, 2, []byte("c")); f.Header.Status() != protocol.StatusOK {
		t.Fatal("the old connection after the reload")
	}
}

// recordCounter is a client's TCP connection that counts the TLS
// application-data records it reads.
type recordCounter struct {
	net.Conn
	mu      sync.Mutex
	header  []byte // the record header being read
	skip    int    // record body bytes still to skip
	records int
}

func (r *recordCounter) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.mu.Lock()
	defer r.mu.Unlock()
	for b := p[:n]; len(b) > 0; {
		if r.skip > 0 {
			k := min(r.skip, len(b))
			r.skip -= k
			b = b[k:]
			continue
		}
		k := min(5-len(r.header), len(b))
		r.header = append(r.header, b[:k]...)
		b = b[k:]
		if len(r.header) == 5 {
			if r.header[0] == 23 { // application data
				r.records++
			}
			r.skip = int(binary.BigEndian.Uint16(r.header[3:5]))
			r.header = r.header[:0]
		}
	}
	return n, err
}

func (r *recordCounter) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.records
}

// Many pipelined requests, answered on the loop and off it, come back
// coalesced: far fewer TLS records than replies.
func TestTLS_RepliesCoalesce(t *testing.T) {
	mux := NewMux()
	mux.HandleFunc(protocol.CmdSend, func(r *Request) { r.Reply(protocol.StatusOK, r.Body) })
	s := startServer(t, Options{}, mux, withTLS(t))
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	counter := &recordCounter{Conn: nc}
	tc := tls.Client(counter, &tls.Config{RootCAs: pkiCA.pool, ServerName: "127.0.0.1"})
	defer tc.Close()
	c := &rawConn{Conn: tc, br: bufio.NewReader(tc)}
	const n = 2000
	var b []byte
	for id := uint64(1); id <= n; id++ {
		cmd := protocol.CmdSend
		if id%2 == 0 {
			cmd = protocol.CmdPing
		}
		b = protocol.AppendRequest(b, cmd, id, []byte("0123456789"))
	}
	c.send(t, b)
	for range n {
		if f := c.readFrame(t); string(f.Body) != "0123456789" {
			t.Fatalf("reply %d: %q", f.Header.RequestID, f.Body)
		}
	}
	if records := counter.count(); records > n/10 {
		t.Fatalf("%d replies came in %d TLS records", n, records)
	} else {
		t.Logf("%d replies came in %d TLS records", n, records)
	}
}

// Bytes that come while the handshake still runs (here the server waits in
// VerifyConnection after the client's handshake is done) are held and
// counted as partial frames. Past MaxPartialBytes the server keeps one
// record more, which names a request, and drops the rest; once the
// handshake is done it serves the whole requests it kept, answers the
// next one StatusBusy and closes the connection, and the memory is back.
func TestTLS_DataDuringTheHandshakeOverTheCap(t *testing.T) {
	release := make(chan struct{})
	cfg := serverTLS(t).Clone()
	cfg.VerifyConnection = func(tls.ConnectionState) error {
		<-release
		return nil
	}
	const limit, body, frames = 64 << 10, 40 << 10, 6
	s := startServer(t, Options{MaxFrameSize: limit, MaxPartialBytes: limit}, NewMux(), func(s *Server) { s.opts.TLS = cfg })
	c := dialTLS(t, s, clientTLS(t))
	var b []byte
	for id := uint64(1); id <= frames; id++ {
		b = protocol.AppendRequest(b, protocol.CmdPing, id, make([]byte, body))
	}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the bytes read during the handshake", func() bool {
		var got int64
		s.live.each(func(c *Conn) { got += c.received.Load() })
		return got >= int64(len(b))
	})
	if p := s.Stats().PartialBytes; p == 0 || p > limit {
		t.Fatalf("partial bytes %d during the handshake, want some and at most %d", p, limit)
	}
	close(release)
	next := uint64(1)
	for {
		f := c.readFrame(t)
		if f.Header.RequestID != next {
			t.Fatalf("answer to request %d, want %d", f.Header.RequestID, next)
		}
		if f.Header.Status() == protocol.StatusOK && len(f.Body) == body {
			next++ // a whole request kept during the handshake
			continue
		}
		if f.Header.Status() != protocol.StatusBusy || !strings.Contains(string(f.Body), "partial frames") {
			t.Fatalf("request %d answered %v %q", next, f.Header.Status(), f.Body)
		}
		break
	}
	if next > frames {
		t.Fatal("every request was served: the test sent too little to pass the cap")
	}
	c.waitClosed(t)
	if got := s.Stats().ClosedPartial; got != 1 {
		t.Fatalf("ClosedPartial %d, want 1", got)
	}
	waitFor(t, 5*time.Second, "no partial bytes", func() bool { return s.Stats().PartialBytes == 0 })
}

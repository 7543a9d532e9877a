package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/pkg/tlsconfig/tlstest"
)

// testCerts is a CA with a server certificate for 127.0.0.1 and localhost
// and a client certificate of app:demo.
type testCerts struct {
	*tlstest.PKI
	client tlsconfig.Files
}

func newTestCerts(t *testing.T) *testCerts {
	t.Helper()
	p := tlstest.New(t)
	return &testCerts{PKI: p, client: p.Client(auth.KindApp, "demo")}
}

// front starts a TLS front (pkg/tlsconfig/tlstest) for a netserver that
// answers pings; identities as tlstest.StartFront takes them.
func (tc *testCerts) front(t *testing.T, identities map[string]string) *tlstest.Front {
	t.Helper()
	s := startServer(t, "127.0.0.1:0", netserver.NewMux())
	return tlstest.StartFront(t, s.Addr().String(), tc.ServerConfig(), identities)
}

func (tc *testCerts) clientConfig(_ *testing.T, withCert bool) *tls.Config {
	if withCert {
		return tc.ClientConfig(tc.client)
	}
	return tc.ClientConfig(tlsconfig.Files{})
}

func TestSecure_TLSRoundTrip(t *testing.T) {
	tc := newTestCerts(t)
	s := tc.front(t, nil)
	c := newClient(t, Options{TLS: tc.clientConfig(t, false), Spin: 30 * time.Microsecond})
	ctx := context.Background()
	// By IP address (verified against the certificate's IP SAN) and by
	// name.
	_, port, _ := strings.Cut(s.Addr, ":")
	for _, addr := range []string{s.Addr, "localhost:" + port} {
		got, err := c.Call(ctx, addr, protocol.CmdPing, []byte("hello"))
		if err != nil || string(got) != "hello" {
			t.Fatalf("Call %s = %q, %v", addr, got, err)
		}
	}
	// Pipelined requests, and bodies larger than a TLS record.
	big := bytes.Repeat([]byte("0123456789abcdef"), 20_000) // 320 KB
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		body := []byte{byte(i)}
		if i%50 == 0 {
			body = big
		}
		wg.Add(1)
		if err := c.Go(s.Addr, protocol.CmdPing, body, 0, func(got []byte, err error) {
			defer wg.Done()
			if err == nil && !bytes.Equal(got, body) {
				err = errors.New("wrong body")
			}
			if err != nil {
				errs <- err
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := s.Accepted.Load(); n != 2 {
		t.Fatalf("%d connections for 2 addresses", n)
	}
}

func TestSecure_ClientCertificate(t *testing.T) {
	tc := newTestCerts(t)
	s := tc.front(t, map[string]string{}) // no secrets: certificates only
	c := newClient(t, Options{TLS: tc.clientConfig(t, true)})
	if _, err := c.Call(context.Background(), s.Addr, protocol.CmdPing, nil); err != nil {
		t.Fatal(err)
	}
	if s.ByCertificate.Load() != 1 {
		t.Fatal("the server did not take the client certificate")
	}
}

func TestSecure_WrongCAFailsCleanly(t *testing.T) {
	tc := newTestCerts(t)
	s := tc.front(t, nil)
	other := newTestCerts(t) // another CA
	c := newClient(t, Options{TLS: other.clientConfig(t, false), BreakerFailures: 2, RedialBackoffMax: time.Second})
	ctx := context.Background()
	_, err := c.Call(ctx, s.Addr, protocol.CmdPing, nil)
	var ve *tls.CertificateVerificationError
	if !errors.Is(err, ErrDial) || !NotSent(err) || !errors.As(err, &ve) {
		t.Fatalf("Call to a server of another CA = %v", err)
	}
	// Calls meanwhile fail fast, the breaker opens, and its error still
	// says why.
	for range 10 {
		_, err = c.Call(ctx, s.Addr, protocol.CmdPing, nil)
	}
	if !errors.Is(err, ErrBreakerOpen) || !errors.As(err, &ve) {
		t.Fatalf("Call with the breaker open = %v", err)
	}
	if n := s.Accepted.Load(); n != 1 {
		t.Fatalf("%d dials within the back-off, want 1", n)
	}
}

func TestSecure_PlaintextAndTLSMismatch(t *testing.T) {
	tc := newTestCerts(t)
	tlsServer := tc.front(t, nil)
	plainServer := startServer(t, "127.0.0.1:0", netserver.NewMux())
	ctx := context.Background()
	// A plaintext client on a TLS port: the connection fails, nothing hangs.
	plain := newClient(t, Options{RequestTimeout: 5 * time.Second})
	start := time.Now()
	if _, err := plain.Call(ctx, tlsServer.Addr, protocol.CmdPing, nil); !errors.Is(err, ErrConnClosed) {
		t.Fatalf("plaintext Call to a TLS port = %v", err)
	}
	// With credentials the first frame is the auth request; the answer is
	// not a frame either.
	withCreds := newClient(t, Options{Credentials: &auth.Credentials{Name: "demo", Secret: "s3cret-value"}})
	if _, err := withCreds.Call(ctx, tlsServer.Addr, protocol.CmdPing, nil); !errors.Is(err, ErrDial) {
		t.Fatalf("plaintext Call with credentials to a TLS port = %v", err)
	}
	// A TLS client on a plaintext port: the handshake fails.
	secure := newClient(t, Options{TLS: tc.clientConfig(t, false)})
	if _, err := secure.Call(ctx, plainServer.Addr().String(), protocol.CmdPing, nil); !errors.Is(err, ErrDial) ||
		!strings.Contains(err.Error(), "tls") {
		t.Fatalf("TLS Call to a plaintext port = %v", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("mismatches took %v to fail", d)
	}
}

func TestSecure_Credentials(t *testing.T) {
	tc := newTestCerts(t)
	s := tc.front(t, map[string]string{"demo": "s3cret-value"})
	c := newClient(t, Options{TLS: tc.clientConfig(t, false), Credentials: &auth.Credentials{Name: "demo", Secret: "s3cret-value"}})
	addr := s.Addr
	for range 3 {
		if _, err := c.Call(context.Background(), addr, protocol.CmdPing, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	// A new connection authenticates again, before its first request.
	c.mu.RLock()
	p := c.peers[addr]
	c.mu.RUnlock()
	p.closeConn(errors.New("test"))
	if _, err := c.Call(context.Background(), addr, protocol.CmdPing, nil); err != nil {
		t.Fatal(err)
	}
	// The front refuses a connection whose first request is not CmdAuth.
	if n, refused := s.BySecret.Load(), s.Refused.Load(); n != 2 || refused != 0 {
		t.Fatalf("%d connections authenticated first (%d refused), want 2", n, refused)
	}
}

func TestSecure_CredentialsRefused(t *testing.T) {
	tc := newTestCerts(t)
	s := tc.front(t, map[string]string{"demo": "right-secret"})
	core, logs := observer.New(zap.DebugLevel)
	const secret = "wrong-secret-XYZ"
	c, err := New(Options{TLS: tc.clientConfig(t, false), Credentials: &auth.Credentials{Name: "demo", Secret: secret},
		BreakerFailures: 2}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := s.Addr
	_, err = c.Call(context.Background(), addr, protocol.CmdPing, nil)
	if !errors.Is(err, protocol.ErrUnauthenticated) || !errors.Is(err, ErrDial) || !NotSent(err) {
		t.Fatalf("Call with a wrong secret = %v", err)
	}
	if !strings.Contains(err.Error(), `"demo"`) || strings.Contains(err.Error(), secret) {
		t.Fatalf("the error must name the identity and not the secret: %v", err)
	}
	// Not a hot loop, and not hidden behind an open breaker: every call
	// says unauthenticated, and the server was asked once.
	for range 20 {
		_, err = c.Call(context.Background(), addr, protocol.CmdPing, nil)
		if !errors.Is(err, protocol.ErrUnauthenticated) {
			t.Fatalf("Call %v", err)
		}
	}
	if st := c.BreakerState(addr); st != gobreaker.StateClosed {
		t.Fatalf("breaker %v: a refusal is the server's answer, not its failure", st)
	}
	// The front counts its refusal after writing it, so the client may see
	// the answer first: wait for the count, then require exactly one.
	for deadline := time.Now().Add(5 * time.Second); s.Refused.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := s.Refused.Load(); n != 1 {
		t.Fatalf("%d auth attempts within the back-off, want 1", n)
	}
	for _, e := range logs.All() {
		line := e.Message
		for _, f := range e.Context {
			line += " " + f.String
			if f.Interface != nil {
				if err, ok := f.Interface.(error); ok {
					line += " " + err.Error()
				}
			}
		}
		if strings.Contains(line, secret) {
			t.Fatalf("a log line shows the secret: %s", line)
		}
	}
	if logs.FilterMessage("server refused the connection").Len() != 1 {
		t.Fatalf("refusal logged %d times, want once", logs.FilterMessage("server refused the connection").Len())
	}
}

func TestSecure_UnknownCommandAuth(t *testing.T) {
	// A server that does not serve CmdAuth (an older one, which answers
	// every command it does not know with StatusUnknownCommand): the dial
	// fails with its status, not a hang. Our netserver serves CmdAuth
	// itself, so the older server is a plain listener here.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go answerUnknown(conn)
		}
	}()
	c := newClient(t, Options{Credentials: &auth.Credentials{Name: "demo", Secret: "x"}})
	_, err = c.Call(context.Background(), ln.Addr().String(), protocol.CmdPing, nil)
	if !errors.Is(err, protocol.ErrUnknownCommand) || !errors.Is(err, ErrDial) {
		t.Fatalf("Call = %v", err)
	}
}

// answerUnknown answers every request frame on conn with
// StatusUnknownCommand until the peer closes it.
func answerUnknown(conn net.Conn) {
	defer conn.Close()
	var buf []byte
	chunk := make([]byte, 4096)
	for {
		n, err := conn.Read(chunk)
		if err != nil {
			return
		}
		buf = append(buf, chunk[:n]...)
		for {
			f, used, err := protocol.ReadFrame(buf, 1<<20)
			if err != nil {
				break
			}
			reply := protocol.AppendResponse(nil, protocol.StatusUnknownCommand, f.Header.RequestID, nil)
			if _, err := conn.Write(reply); err != nil {
				return
			}
			buf = buf[used:]
		}
	}
}

func TestOptions_ValidateCredentials(t *testing.T) {
	for _, tc := range []struct {
		name  string
		creds auth.Credentials
	}{
		{"no secret", auth.Credentials{Name: "demo"}},
		{"bad name", auth.Credentials{Name: "a b", Secret: "top-secret"}},
		{"long secret", auth.Credentials{Name: "demo", Secret: strings.Repeat("s", protocol.MaxAuthSecret+1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Options{Credentials: &tc.creds}.Validate()
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("Validate = %v", err)
			}
			if tc.creds.Secret != "" && strings.Contains(err.Error(), tc.creds.Secret[:5]) && tc.name != "bad name" {
				t.Fatalf("the message shows the secret: %v", err)
			}
		})
	}
}

func TestTLSFor_ServerName(t *testing.T) {
	base := &tls.Config{VerifyConnection: func(cs tls.ConnectionState) error {
		if cs.ServerName != "10.1.2.3" {
			return errors.New("no name: " + cs.ServerName)
		}
		return nil
	}}
	cfg := tlsFor(base, "10.1.2.3:20881")
	if cfg.ServerName != "10.1.2.3" || base.ServerName != "" {
		t.Fatalf("ServerName %q (base %q)", cfg.ServerName, base.ServerName)
	}
	if err := cfg.VerifyConnection(tls.ConnectionState{}); err != nil {
		t.Fatal(err)
	}
	named := tlsFor(&tls.Config{ServerName: "meta.example"}, "[::1]:1")
	if named.ServerName != "meta.example" {
		t.Fatalf("a set ServerName was replaced: %q", named.ServerName)
	}
	if got := tlsFor(&tls.Config{}, "[::1]:1").ServerName; got != "::1" {
		t.Fatalf("IPv6 host %q", got)
	}
}

func TestCredentialsFromEnvAndFile(t *testing.T) {
	t.Setenv(CredentialsEnv, "")
	if c, err := CredentialsFromEnv(); c != nil || err != nil {
		t.Fatalf("unset: %v, %v", c, err)
	}
	t.Setenv(CredentialsEnv, "demo:top-secret\n")
	if c, err := CredentialsFromEnv(); err != nil || c.Name != "demo" || c.Secret != "top-secret" {
		t.Fatalf("set: %v, %v", c, err)
	}
	t.Setenv(CredentialsEnv, "no-secret-here")
	if _, err := CredentialsFromEnv(); err == nil || strings.Contains(err.Error(), "no-secret-here") {
		t.Fatalf("malformed: %v", err)
	}
	path := filepath.Join(t.TempDir(), "app.cred")
	if err := os.WriteFile(path, []byte("demo:top-secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := CredentialsFromFile(path); err == nil {
		t.Fatal("a credentials file others may read was accepted")
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := CredentialsFromFile(path); err != nil || c.Name != "demo" || c.Secret != "top-secret" {
		t.Fatalf("file: %v, %v", c, err)
	}
}

// TestSecure_AuthenticatedLogRepeatsNoKey: a broker's transport logs with
// a logger that already names its group; the line that records the
// identity a connection proved names the identity's group under a key of
// its own, so a JSON log line never carries "group" twice.
func TestSecure_AuthenticatedLogRepeatsNoKey(t *testing.T) {
	tc := newTestCerts(t)
	s := tc.front(t, map[string]string{"demo": "s3cret-value"})
	core, logs := observer.New(zap.DebugLevel)
	c, err := New(Options{TLS: tc.clientConfig(t, false), Credentials: &auth.Credentials{Name: "demo", Secret: "s3cret-value"}},
		zap.New(core).With(zap.String("group", "rt1")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Call(context.Background(), s.Addr, protocol.CmdPing, nil); err != nil {
		t.Fatal(err)
	}
	entries := logs.FilterMessage("authenticated").All()
	if len(entries) == 0 {
		t.Fatal("no authenticated line logged")
	}
	for _, e := range entries {
		seen := map[string]bool{}
		for _, f := range e.Context {
			if seen[f.Key] {
				t.Fatalf("key %q twice in %q: %+v", f.Key, e.Message, e.Context)
			}
			seen[f.Key] = true
		}
	}
}

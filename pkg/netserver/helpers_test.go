package netserver

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/qmq-go/qmq/pkg/protocol"

	"github.com/qmq-go/qmq/pkg/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// gnet's shared worker pool (ants) keeps a purge goroutine for the
		// life of the process.
		goleak.IgnoreAnyFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
		goleak.IgnoreAnyFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
	)
}

// testServer is a started server and the log lines it wrote.
type testServer struct {
	*Server
	logs *observer.ObservedLogs
}

// startServer makes a server with opts (checked by New), applies before
// (if any) to it, starts it and closes it when the test ends. before may set
// what Validate refuses (a test's exaggerated Spin).
func startServer(t testing.TB, opts Options, h Handler, before ...func(*Server)) *testServer {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	s, err := New(opts, h, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	if tlsMode {
		before = append([]func(*Server){withTLS(t)}, before...)
	}
	for _, f := range before {
		f(s)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(ctx)
		if t.Failed() { // what the server said, to tell why
			for _, e := range logs.FilterLevelExact(zapcore.WarnLevel).All() {
				t.Logf("server warned %q %v", e.Message, e.ContextMap())
			}
		}
	})
	return &testServer{Server: s, logs: logs}
}

// waitLog polls until a log line with msg whose reason field contains
// reason has been written.
func (s *testServer) waitLog(t testing.TB, reason string) {
	t.Helper()
	waitFor(t, 5*time.Second, "log reason "+reason, func() bool {
		for _, e := range s.logs.FilterMessage("closing connection").All() {
			if r, ok := e.ContextMap()["reason"].(string); ok && strings.Contains(r, reason) {
				return true
			}
		}
		return false
	})
}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, timeout, what, cond)
}

// rawConn is a test client speaking frames over plain TCP.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

// dial connects to s: over TLS (clientTLS, no client certificate) when s
// serves TLS.
func dial(t testing.TB, s *testServer) *rawConn {
	t.Helper()
	if s.opts.TLS != nil {
		return dialTLS(t, s, clientTLS(t))
	}
	nc, err := net.DialTimeout("tcp", s.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{Conn: nc, br: bufio.NewReader(nc)}
}

// tryDial connects to s as dial does, returning the error; the caller
// closes the connection.
func tryDial(s *testServer) (*rawConn, error) {
	if s.opts.TLS != nil {
		return tryDialTLS(s, &tls.Config{RootCAs: pkiCA.pool})
	}
	nc, err := net.DialTimeout("tcp", s.Addr().String(), 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &rawConn{Conn: nc, br: bufio.NewReader(nc)}, nil
}

// dialTLS connects to s with cfg and completes the handshake.
func dialTLS(t testing.TB, s *testServer, cfg *tls.Config) *rawConn {
	t.Helper()
	c, err := tryDialTLS(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func tryDialTLS(s *testServer, cfg *tls.Config) (*rawConn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	tc, err := tls.DialWithDialer(d, "tcp", s.Addr().String(), cfg)
	if err != nil {
		return nil, err
	}
	return &rawConn{Conn: tc, br: bufio.NewReader(tc)}, nil
}

// tcp returns the TCP connection under c.
func (c *rawConn) tcp() *net.TCPConn {
	if tc, ok := c.Conn.(*tls.Conn); ok {
		return tc.NetConn().(*net.TCPConn)
	}
	return c.Conn.(*net.TCPConn)
}

// closeWrite ends the client's side of the stream (TLS: close_notify).
func (c *rawConn) closeWrite() error {
	switch nc := c.Conn.(type) {
	case *tls.Conn:
		return nc.CloseWrite()
	case *net.TCPConn:
		return nc.CloseWrite()
	}
	return nil
}

func (c *rawConn) send(t testing.TB, b []byte) {
	t.Helper()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

// readFrame reads one response frame within 5 s.
func (c *rawConn) readFrame(t testing.TB) protocol.Frame {
	t.Helper()
	f, err := c.tryReadFrame(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (c *rawConn) tryReadFrame(timeout time.Duration) (protocol.Frame, error) {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	hb := make([]byte, protocol.HeaderSize)
	if _, err := io.ReadFull(c.br, hb); err != nil {
		return protocol.Frame{}, err
	}
	h, err := protocol.ParseHeader(hb, 0)
	if err != nil {
		return protocol.Frame{}, err
	}
	body := make([]byte, h.BodyLen)
	if _, err := io.ReadFull(c.br, body); err != nil {
		return protocol.Frame{}, err
	}
	return protocol.Frame{Header: h, Body: body}, nil
}

// waitClosed asserts that the server closes the connection: a read ends
// with EOF or a reset within 5 s, after any replies already sent.
func (c *rawConn) waitClosed(t testing.TB) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, c.br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server did not close the connection")
	}
	// (Over TLS a connection closed in the middle of a record, its unsent
	// replies dropped, ends with io.ErrUnexpectedEOF.)
	if err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read: %v", err)
	}
}

func isReset(err error) bool {
	var se *os.SyscallError
	return errors.As(err, &se)
}

// ping checks that a new connection to s gets its ping answered.
func ping(t testing.TB, s *testServer) {
	t.Helper()
	c := dial(t, s)
	c.send(t, protocol.AppendRequest(nil, protocol.CmdPing, 7, []byte("alive")))
	f := c.readFrame(t)
	if f.Header.Status() != protocol.StatusOK || f.Header.RequestID != 7 || string(f.Body) != "alive" {
		t.Fatalf("ping answered %+v %q", f.Header, f.Body)
	}
	c.Close()
}

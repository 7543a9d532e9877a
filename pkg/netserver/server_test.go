package netserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/qmq-go/qmq/pkg/protocol"
)

func TestServer_Addr_Port0(t *testing.T) {
	s := startServer(t, Options{Addr: "127.0.0.1:0"}, NewMux())
	addr, ok := s.Addr().(*net.TCPAddr)
	if !ok || addr.Port == 0 || !addr.IP.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("Addr() = %v", s.Addr())
	}
	ping(t, s)
}

func TestServer_Start_AddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	core, logs := observer.New(zapcore.DebugLevel)
	s, err := New(Options{Addr: ln.Addr().String()}, NewMux(), zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Start() }()
	select {
	case err := <-done:
		// The bind's own error, not EBADF from gnet setting keep-alive on
		// the listener it had closed (see Start).
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("Start on a used address: %v, want EADDRINUSE", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start hangs on a used address")
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Its log lines are whole: no address that was never had (zap turns
	// a nil Stringer's panic into an "addrError" field).
	for _, e := range logs.All() {
		for k, v := range e.ContextMap() {
			if strings.HasSuffix(k, "Error") {
				t.Errorf("log %q has %s=%v", e.Message, k, v)
			}
		}
	}
}

func TestOptions_Validate(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"bad addr", Options{Addr: "nohostport"}},
		{"negative frame size", Options{MaxFrameSize: -1}},
		{"negative conns", Options{MaxConns: -1}},
		{"negative outbound", Options{MaxOutboundBytes: -1}},
		{"negative in flight", Options{MaxInFlight: -1}},
		{"negative loops", Options{EventLoops: -1}},
		{"negative handshake timeout", Options{HandshakeTimeout: -1}},
		{"auth required without an authority", Options{RequireAuth: true}},
		{"partial bytes under the frame size", Options{MaxFrameSize: 4 << 20, MaxPartialBytes: 1 << 20}},
		{"tiny read rate window", Options{ReadRateWindow: time.Millisecond}},
		{"negative conns per identity", Options{MaxConnsPerIdentity: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("Validate() = %v", err)
			}
			t.Log(err)
			if _, err := New(tc.opts, NewMux(), nil); !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("New() = %v", err)
			}
		})
	}
	if err := (Options{}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// frames returns n ping requests with ids 1..n and bodies of varying size.
func pingFrames(n int) ([]byte, map[uint64][]byte) {
	var b []byte
	want := map[uint64][]byte{}
	for i := 1; i <= n; i++ {
		body := bytes.Repeat([]byte{byte(i)}, i%5*7)
		b = protocol.AppendRequest(b, protocol.CmdPing, uint64(i), body)
		want[uint64(i)] = body
	}
	return b, want
}

func readReplies(t *testing.T, c *rawConn, want map[uint64][]byte) {
	t.Helper()
	for range len(want) {
		f := c.readFrame(t)
		body, ok := want[f.Header.RequestID]
		if !ok || f.Header.Status() != protocol.StatusOK || !f.Header.IsResponse() || !bytes.Equal(f.Body, body) {
			t.Fatalf("unexpected reply %+v %q", f.Header, f.Body)
		}
		delete(want, f.Header.RequestID)
	}
}

func TestServer_Framing_SplitAtEveryByte(t *testing.T) {
	s := startServer(t, Options{}, NewMux())
	stream, _ := pingFrames(4)
	c := dial(t, s)
	c.tcp().SetNoDelay(true)
	for split := 1; split < len(stream); split++ {
		_, want := pingFrames(4)
		c.send(t, stream[:split])
		time.Sleep(time.Millisecond) // let the server read the first part alone
		c.send(t, stream[split:])
		readReplies(t, c, want)
	}
}

func TestServer_Framing_ByteByByte(t *testing.T) {
	s := startServer(t, Options{}, NewMux())
	stream, want := pingFrames(3)
	c := dial(t, s)
	c.tcp().SetNoDelay(true)
	for i := range stream {
		c.send(t, stream[i:i+1])
	}
	readReplies(t, c, want)
}

func TestServer_Framing_ManyFramesPerRead(t *testing.T) {
	s := startServer(t, Options{}, NewMux())
	stream, want := pingFrames(2000)
	c := dial(t, s)
	c.send(t, stream) // one write: many frames arrive in each read
	readReplies(t, c, want)
}

func TestServer_LargeFrameAcrossReads(t *testing.T) {
	s := startServer(t, Options{MaxFrameSize: 4 << 20}, NewMux())
	body := make([]byte, 3<<20)
	for i := range body {
		body[i] = byte(i * 7)
	}
	c := dial(t, s)
	go c.Write(protocol.AppendRequest(nil, protocol.CmdPing, 1, body))
	f := c.readFrame(t)
	if !bytes.Equal(f.Body, body) {
		t.Fatal("large echo differs")
	}
}

func TestServer_UnknownCommand_KeepsConnection(t *testing.T) {
	s := startServer(t, Options{}, NewMux())
	c := dial(t, s)
	c.send(t, protocol.AppendRequest(nil, protocol.Command(999), 1, nil))
	f := c.readFrame(t)
	if f.Header.Status() != protocol.StatusUnknownCommand || f.Header.RequestID != 1 {
		t.Fatalf("got %+v", f.Header)
	}
	c.send(t, protocol.AppendRequest(nil, protocol.CmdPing, 2, []byte("x")))
	if f := c.readFrame(t); f.Header.Status() != protocol.StatusOK || f.Header.RequestID != 2 {
		t.Fatalf("ping after unknown command: %+v", f.Header)
	}
}

// badInputCase sends bytes that must make the server close the connection
// with a logged reason, while another client keeps being served.
func badInputCase(t *testing.T, input []byte, reason string) {
	t.Helper()
	s := startServer(t, Options{MaxFrameSize: 1 << 20}, NewMux())
	other := dial(t, s)
	other.send(t, protocol.AppendRequest(nil, protocol.CmdPing, 1, nil))
	other.readFrame(t)

	bad := dial(t, s)
	_, _ = bad.Write(input) // the server may close before it has read all of it
	bad.waitClosed(t)
	s.waitLog(t, reason)

	other.send(t, protocol.AppendRequest(nil, protocol.CmdPing, 2, []byte("still here")))
	if f := other.readFrame(t); string(f.Body) != "still here" {
		t.Fatalf("other client got %q", f.Body)
	}
	ping(t, s)
}

func TestServer_BadInput_BadMagic(t *testing.T) {
	frame := protocol.AppendRequest(nil, protocol.CmdPing, 1, []byte("x"))
	frame[0] = 'X'
	badInputCase(t, frame, "malformed frame")
}

func TestServer_BadInput_UnknownVersion(t *testing.T) {
	frame := protocol.AppendRequest(nil, protocol.CmdPing, 1, []byte("x"))
	frame[2] = protocol.Version + 1
	badInputCase(t, frame, "malformed frame")
}

func TestServer_BadInput_UnknownFlags(t *testing.T) {
	frame := protocol.AppendRequest(nil, protocol.CmdPing, 1, []byte("x"))
	frame[3] = 0x80
	badInputCase(t, frame, "malformed frame")
}

func TestServer_BadInput_OversizedLength(t *testing.T) {
	h := protocol.AppendHeader(nil, protocol.Header{Version: protocol.Version, Code: uint16(protocol.CmdPing),
		RequestID: 1, BodyLen: 1<<20 + 1})
	badInputCase(t, h, "malformed frame")
}

func TestServer_BadInput_ResponseFrame(t *testing.T) {
	badInputCase(t, protocol.AppendResponse(nil, protocol.StatusOK, 1, nil), "response frame")
}

func TestServer_BadInput_RandomBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	junk := make([]byte, 4096)
	for i := range junk {
		junk[i] = byte(r.Uint32())
	}
	junk[0] = 0 // never a valid magic
	badInputCase(t, junk, "malformed frame")
}

func TestServer_BadInput_TruncatedFrameThenClose(t *testing.T) {
	s := startServer(t, Options{}, NewMux())
	other := dial(t, s)
	frame := protocol.AppendRequest(nil, protocol.CmdPing, 1, make([]byte, 100))
	bad := dial(t, s)
	bad.send(t, frame[:50]) // a whole header and half the body
	time.Sleep(5 * time.Millisecond)
	_ = bad.closeWrite()
	bad.waitClosed(t)
	s.waitLog(t, "in the middle of a frame")
	other.send(t, protocol.AppendRequest(nil, protocol.CmdPing, 2, nil))
	other.readFrame(t)
}

func TestServer_BadInput_ClientNeverReads(t *testing.T) {
	const limit = 256 << 10
	s := startServer(t, Options{MaxOutboundBytes: limit}, NewMux())
	other := dial(t, s)

	// The slow client sends large pings and never reads the echoes; once
	// the socket buffers are full, the server's unsent bytes pass the limit.
	slow := dial(t, s)
	body := make([]byte, 64<<10)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for id := uint64(1); ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = slow.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := slow.Write(protocol.AppendRequest(nil, protocol.CmdPing, id, body)); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue // the server stopped reading for a moment
				}
				return // closed by the server
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	// Meanwhile the other client is served.
	for i := range 20 {
		other.send(t, protocol.AppendRequest(nil, protocol.CmdPing, uint64(i), []byte("hi")))
		if f := other.readFrame(t); string(f.Body) != "hi" {
			t.Fatalf("other client got %q", f.Body)
		}
	}
	s.waitLog(t, "MaxOutboundBytes")
	slow.waitClosed(t)
	ping(t, s)
}

func TestServer_MaxConns(t *testing.T) {
	s := startServer(t, Options{MaxConns: 2}, NewMux())
	a, b := dial(t, s), dial(t, s)
	a.send(t, protocol.AppendRequest(nil, protocol.CmdPing, 1, nil))
	b.send(t, protocol.AppendRequest(nil, protocol.CmdPing, 1, nil))
	a.readFrame(t)
	b.readFrame(t)
	// Over TLS the server closes it before the handshake.
	if third, err := tryDial(s); err == nil {
		third.waitClosed(t)
		third.Close()
	}
	s.waitLog(t, "over MaxConns")
	a.send(t, protocol.AppendRequest(nil, protocol.CmdPing, 2, nil))
	a.readFrame(t)

	// A slot frees when a connection closes.
	b.Close()
	waitFor(t, 5*time.Second, "a free connection slot", func() bool {
		c, err := tryDial(s)
		if err != nil {
			return false
		}
		defer c.Close()
		c.send(t, protocol.AppendRequest(nil, protocol.CmdPing, 3, nil))
		_, err = c.tryReadFrame(time.Second)
		return err == nil
	})
}

func TestServer_MaxInFlight_Busy(t *testing.T) {
	release := make(chan struct{})
	var held []*Request
	var mu sync.Mutex
	h := HandlerFunc(func(r *Request) {
		mu.Lock()
		held = append(held, r)
		mu.Unlock()
		go func() {
			<-release
			r.Reply(protocol.StatusOK, r.Body)
		}()
	})
	s := startServer(t, Options{MaxInFlight: 2}, h)
	c := dial(t, s)
	var b []byte
	for id := uint64(1); id <= 3; id++ {
		b = protocol.AppendRequest(b, protocol.CmdPing, id, nil)
	}
	c.send(t, b)
	f := c.readFrame(t)
	if f.Header.RequestID != 3 || f.Header.Status() != protocol.StatusBusy {
		t.Fatalf("third request answered %+v", f.Header)
	}
	close(release)
	got := map[uint64]bool{}
	for range 2 {
		got[c.readFrame(t).Header.RequestID] = true
	}
	if !got[1] || !got[2] {
		t.Fatalf("held requests answered %v", got)
	}
}

func TestServer_OneWay_NoReply(t *testing.T) {
	var served atomic.Int64
	mux := NewMux()
	mux.HandleFunc(protocol.CmdAck, func(r *Request) {
		served.Add(1)
		r.Reply(protocol.StatusOK) // dropped: one-way
	})
	s := startServer(t, Options{}, mux)
	c := dial(t, s)
	oneWay := protocol.AppendHeader(nil, protocol.Header{Version: protocol.Version, Flags: protocol.FlagOneWay,
		Code: uint16(protocol.CmdAck), RequestID: 1})
	c.send(t, oneWay)
	c.send(t, protocol.AppendRequest(nil, protocol.CmdPing, 2, nil))
	if f := c.readFrame(t); f.Header.RequestID != 2 {
		t.Fatalf("first reply is to %d, want the ping (2)", f.Header.RequestID)
	}
	waitFor(t, 5*time.Second, "the one-way request served", func() bool { return served.Load() == 1 })
	if f, err := c.tryReadFrame(50 * time.Millisecond); err == nil {
		t.Fatalf("a one-way request was answered: %+v", f.Header)
	}
}

func TestRequest_ReplyLater_MultipleSlices_OnlyFirstCounts(t *testing.T) {
	mux := NewMux()
	mux.HandleFunc(protocol.CmdPull, func(r *Request) {
		go func() {
			time.Sleep(20 * time.Millisecond) // a long poll that finds data
			r.Reply(protocol.StatusOK, []byte("ab"), nil, []byte("cd"))
			r.ReplyError(protocol.ErrBusy) // ignored
		}()
	})
	mux.HandleFunc(protocol.CmdAck, func(r *Request) {
		r.ReplyError(fmt.Errorf("wrapped: %w", protocol.Errorf(protocol.StatusNotFound, "no such group")))
	})
	s := startServer(t, Options{}, mux)
	c := dial(t, s)
	c.send(t, protocol.AppendRequest(nil, protocol.CmdPull, 1, nil))
	c.send(t, protocol.AppendRequest(nil, protocol.CmdAck, 2, nil))
	ack := c.readFrame(t)
	if ack.Header.RequestID != 2 || ack.Header.Status() != protocol.StatusNotFound ||
		string(ack.Body) != "wrapped: qmq: not found: no such group" {
		t.Fatalf("ack answered %+v %q", ack.Header, ack.Body)
	}
	pull := c.readFrame(t)
	if pull.Header.RequestID != 1 || string(pull.Body) != "abcd" {
		t.Fatalf("pull answered %+v %q", pull.Header, pull.Body)
	}
	if _, err := c.tryReadFrame(50 * time.Millisecond); err == nil {
		t.Fatal("a second reply was written")
	}
}

func TestRequest_Done_ClosedWhenClientLeaves(t *testing.T) {
	got := make(chan *Request, 1)
	s := startServer(t, Options{}, HandlerFunc(func(r *Request) { got <- r }))
	c := dial(t, s)
	c.send(t, protocol.AppendRequest(nil, protocol.CmdPull, 1, []byte("body")))
	r := <-got
	if string(r.Body) != "body" || r.Conn.RemoteAddr() != c.LocalAddr().String() || r.Conn.ID() == 0 {
		t.Fatalf("request %q from %s id %d", r.Body, r.Conn.RemoteAddr(), r.Conn.ID())
	}
	select {
	case <-r.Done():
		t.Fatal("Done closed while the client is connected")
	default:
	}
	c.Close()
	select {
	case <-r.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after the client left")
	}
	r.Reply(protocol.StatusOK) // dropped, must not panic
}

func TestServer_Close_DrainsInFlight(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	h := HandlerFunc(func(r *Request) {
		close(started)
		go func() {
			<-release // a slow request
			r.Reply(protocol.StatusOK, []byte("slow done"))
		}()
	})
	s := startServer(t, Options{}, h)
	c := dial(t, s)
	c.send(t, protocol.AppendRequest(nil, protocol.CmdSend, 1, nil))
	<-started
	if st := s.Stats(); st.Conns != 1 || st.InFlight != 1 {
		t.Fatalf("Stats() = %+v, want 1 connection and 1 request in flight", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- s.Close(ctx) }()

	// New requests during the drain are refused; Close waits for the slow one.
	waitFor(t, 5*time.Second, "the server to start closing", s.closing.Load)
	c.send(t, protocol.AppendRequest(nil, protocol.CmdSend, 2, nil))
	if f := c.readFrame(t); f.Header.RequestID != 2 || f.Header.Status() != protocol.StatusShuttingDown {
		t.Fatalf("request during drain answered %+v", f.Header)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if f := c.readFrame(t); f.Header.RequestID != 1 || string(f.Body) != "slow done" {
		t.Fatalf("in-flight request answered %+v %q", f.Header, f.Body)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	c.waitClosed(t)
	if _, err := net.DialTimeout("tcp", s.Addr().String(), time.Second); err == nil {
		t.Fatal("the closed server accepts connections")
	}
}

func TestServer_Close_DeadlineWithStuckRequest(t *testing.T) {
	s := startServer(t, Options{}, HandlerFunc(func(r *Request) {})) // never replies
	c := dial(t, s)
	c.send(t, protocol.AppendRequest(nil, protocol.CmdSend, 1, nil))
	waitFor(t, 5*time.Second, "the request to be in flight", func() bool { return s.busy.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want a deadline error", err)
	}
	c.waitClosed(t)
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestServer_ManyClientsConcurrently(t *testing.T) {
	s := startServer(t, Options{}, NewMux())
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		c := dial(t, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream, want := pingFrames(200 + i)
			if _, err := c.Write(stream); err != nil {
				errs <- err
				return
			}
			for range len(want) {
				f, err := c.tryReadFrame(5 * time.Second)
				if err != nil {
					errs <- err
					return
				}
				if body, ok := want[f.Header.RequestID]; !ok || !bytes.Equal(body, f.Body) {
					errs <- fmt.Errorf("client %d: unexpected reply %+v", i, f.Header)
					return
				}
				delete(want, f.Header.RequestID)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestMux_InlineHandlers(t *testing.T) {
	var oneWay atomic.Int64
	mux := NewMux()
	mux.HandleInline(protocol.CmdBrokerStats, HandlerFunc(func(r *Request) {
		r.Reply(protocol.StatusOK, []byte("stats:"), r.Body)
	}))
	mux.HandleInline(protocol.CmdLookup, HandlerFunc(func(r *Request) {})) // forgets to reply
	mux.HandleInline(protocol.CmdAck, HandlerFunc(func(r *Request) { oneWay.Add(1) }))
	if !mux.Inline(protocol.CmdPing) || !mux.Inline(protocol.CmdBrokerStats) || mux.Inline(protocol.CmdSend) {
		t.Fatal("Inline reports the wrong commands")
	}
	s := startServer(t, Options{}, mux)
	c := dial(t, s)
	b := protocol.AppendRequest(nil, protocol.CmdBrokerStats, 1, []byte("x"))
	b = protocol.AppendRequest(b, protocol.CmdLookup, 2, nil)
	b = protocol.AppendHeader(b, protocol.Header{Version: protocol.Version, Flags: protocol.FlagOneWay, Code: uint16(protocol.CmdAck), RequestID: 3})
	b = protocol.AppendRequest(b, protocol.CmdPing, 4, []byte("p"))
	c.send(t, b)
	got := map[uint64]protocol.Frame{}
	for range 3 {
		f := c.readFrame(t)
		got[f.Header.RequestID] = f
	}
	if f := got[1]; f.Header.Status() != protocol.StatusOK || string(f.Body) != "stats:x" {
		t.Fatalf("inline stats: %+v %q", f.Header, f.Body)
	}
	if f := got[2]; f.Header.Status() != protocol.StatusInternal {
		t.Fatalf("inline handler without a reply: %+v", f.Header)
	}
	if f := got[4]; string(f.Body) != "p" {
		t.Fatalf("ping: %q", f.Body)
	}
	if oneWay.Load() != 1 {
		t.Fatalf("inline one-way served %d times", oneWay.Load())
	}
	if _, err := c.tryReadFrame(50 * time.Millisecond); err == nil {
		t.Fatal("an inline one-way request was answered")
	}
	waitFor(t, 5*time.Second, "nothing held", func() bool { return s.busy.Load() == 0 })
}

func TestServer_HandlerPanic_AnsweredInternal(t *testing.T) {
	mux := NewMux()
	mux.HandleFunc(protocol.CmdSend, func(r *Request) { panic("boom") })
	mux.HandleInline(protocol.CmdLookup, HandlerFunc(func(r *Request) { panic("inline boom") }))
	s := startServer(t, Options{}, mux)
	c := dial(t, s)
	c.send(t, protocol.AppendRequest(nil, protocol.CmdSend, 1, nil))
	c.send(t, protocol.AppendRequest(nil, protocol.CmdLookup, 2, nil))
	for range 2 {
		if f := c.readFrame(t); f.Header.Status() != protocol.StatusInternal {
			t.Fatalf("panicking handler answered %+v", f.Header)
		}
	}
	if s.logs.FilterMessage("handler panic").Len() != 2 {
		t.Fatal("panics not logged")
	}
	ping(t, s)
}

func TestServer_BadInput_FloodWithoutReading(t *testing.T) {
	// Every request is held, so past MaxInFlight each is refused with a
	// StatusBusy reply the client never reads: those must hit the cap too.
	const limit = 128 << 10
	release := make(chan struct{})
	defer close(release)
	mux := NewMux()
	mux.HandleFunc(protocol.CmdSend, func(r *Request) {
		go func() {
			<-release
			r.Reply(protocol.StatusOK)
		}()
	})
	s := startServer(t, Options{MaxOutboundBytes: limit, MaxInFlight: 1}, mux)
	other := dial(t, s)
	flood := dial(t, s)
	var batch []byte
	for id := uint64(1); id <= 1000; id++ {
		batch = protocol.AppendRequest(batch, protocol.CmdSend, id, nil)
	}
	go func() {
		for {
			_ = flood.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := flood.Write(batch); err != nil {
				return
			}
		}
	}()
	s.waitLog(t, "MaxOutboundBytes")
	other.send(t, protocol.AppendRequest(nil, protocol.CmdPing, 1, []byte("ok")))
	if f := other.readFrame(t); string(f.Body) != "ok" {
		t.Fatalf("other client got %q", f.Body)
	}
}

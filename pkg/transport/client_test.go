package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
		goleak.IgnoreAnyFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
	)
}

func startServer(t testing.TB, addr string, h netserver.Handler) *netserver.Server {
	t.Helper()
	s, err := netserver.New(netserver.Options{Addr: addr}, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

func newClient(t testing.TB, opts Options) *Client {
	t.Helper()
	c, err := New(opts, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, timeout, what, cond)
}

// holdServer is a netserver whose CmdSend requests are held until the test
// releases them.
type holdServer struct {
	*netserver.Server
	mu   sync.Mutex
	held []*netserver.Request
}

func startHoldServer(t testing.TB) *holdServer {
	hs := &holdServer{}
	mux := netserver.NewMux()
	mux.HandleFunc(protocol.CmdSend, func(r *netserver.Request) {
		hs.mu.Lock()
		hs.held = append(hs.held, r)
		hs.mu.Unlock()
	})
	hs.Server = startServer(t, "127.0.0.1:0", mux)
	return hs
}

func (hs *holdServer) count() int {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return len(hs.held)
}

func (hs *holdServer) take() []*netserver.Request {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	h := hs.held
	hs.held = nil
	return h
}

func TestClient_Call_Ping(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", netserver.NewMux())
	c := newClient(t, Options{})
	got, err := c.Call(context.Background(), s.Addr().String(), protocol.CmdPing, []byte("hello"))
	if err != nil || string(got) != "hello" {
		t.Fatalf("Call = %q, %v", got, err)
	}
	got, err = c.Call(context.Background(), s.Addr().String(), protocol.CmdPing, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("empty Call = %q, %v", got, err)
	}
}

func TestClient_Pipelining_OutOfOrderReplies(t *testing.T) {
	hs := startHoldServer(t)
	c := newClient(t, Options{})
	const n = 100
	type res struct {
		body []byte
		err  error
	}
	results := make([]chan res, n)
	for i := range n {
		results[i] = make(chan res, 1)
		err := c.Go(hs.Addr().String(), protocol.CmdSend, []byte(fmt.Sprintf("req-%d", i)), 0, func(b []byte, err error) {
			results[i] <- res{b, err}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "all requests at the server", func() bool { return hs.count() == n })
	held := hs.take()
	for i := len(held) - 1; i >= 0; i-- { // answer in reverse order
		held[i].Reply(protocol.StatusOK, []byte("re:"), held[i].Body)
	}
	for i := range n {
		r := <-results[i]
		if r.err != nil || string(r.body) != fmt.Sprintf("re:req-%d", i) {
			t.Fatalf("request %d got %q, %v", i, r.body, r.err)
		}
	}
}

func TestClient_Call_BusinessStatusIsProtocolError(t *testing.T) {
	mux := netserver.NewMux()
	mux.HandleFunc(protocol.CmdSend, func(r *netserver.Request) {
		r.ReplyError(protocol.Errorf(protocol.StatusReadonly, "group g1 is readonly"))
	})
	s := startServer(t, "127.0.0.1:0", mux)
	c := newClient(t, Options{BreakerFailures: 2})
	for range 20 {
		_, err := c.Call(context.Background(), s.Addr().String(), protocol.CmdSend, nil)
		var pe *protocol.Error
		if !errors.Is(err, protocol.ErrReadonly) || !errors.As(err, &pe) || pe.Message != "group g1 is readonly" {
			t.Fatalf("Call = %v", err)
		}
		if NotSent(err) {
			t.Fatal("NotSent holds for an answered request")
		}
	}
	_, err := c.Call(context.Background(), s.Addr().String(), protocol.Command(999), nil)
	if !errors.Is(err, protocol.ErrUnknownCommand) {
		t.Fatalf("unknown command: %v", err)
	}
	if st := c.BreakerState(s.Addr().String()); st != gobreaker.StateClosed {
		t.Fatalf("breaker %v after business errors", st)
	}
}

func TestClient_Call_TimeoutFromContext(t *testing.T) {
	hs := startHoldServer(t)
	c := newClient(t, Options{BreakerFailures: 100})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Call(ctx, hs.Addr().String(), protocol.CmdSend, nil)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call = %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d < 90*time.Millisecond || d > 2*time.Second {
		t.Fatalf("timed out after %v", d)
	}
	if NotSent(err) {
		t.Fatal("a timed-out request counts as not sent")
	}
	// A late reply to the timed-out request is dropped; the connection
	// keeps working.
	for _, r := range hs.take() {
		r.Reply(protocol.StatusOK, []byte("late"))
	}
	if got, err := c.Call(context.Background(), hs.Addr().String(), protocol.CmdPing, []byte("x")); err != nil || string(got) != "x" {
		t.Fatalf("Call after a timeout = %q, %v", got, err)
	}
}

func TestClient_Call_DefaultRequestTimeout(t *testing.T) {
	hs := startHoldServer(t)
	c := newClient(t, Options{RequestTimeout: 80 * time.Millisecond})
	start := time.Now()
	_, err := c.Call(context.Background(), hs.Addr().String(), protocol.CmdSend, nil)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Call = %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("default timeout took %v", d)
	}
	done := make(chan error, 1)
	if err := c.Go(hs.Addr().String(), protocol.CmdSend, nil, 50*time.Millisecond, func(_ []byte, err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("Go = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Go timeout never fired")
	}
}

// CallTimeout's own timeout replaces RequestTimeout, shorter or longer.
func TestClient_CallTimeout(t *testing.T) {
	hs := startHoldServer(t)
	c := newClient(t, Options{RequestTimeout: 5 * time.Second})
	start := time.Now()
	_, err := c.CallTimeout(context.Background(), hs.Addr().String(), protocol.CmdSend, nil, 100*time.Millisecond)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("CallTimeout = %v", err)
	}
	if d := time.Since(start); d < 80*time.Millisecond || d > 2*time.Second {
		t.Fatalf("a 100 ms timeout took %v", d)
	}
	short := newClient(t, Options{RequestTimeout: 50 * time.Millisecond})
	done := make(chan error, 1)
	go func() {
		_, err := short.CallTimeout(context.Background(), hs.Addr().String(), protocol.CmdSend, nil, time.Hour)
		done <- err
	}()
	waitFor(t, 5*time.Second, "the request held", func() bool { return hs.count() == 2 })
	select {
	case err := <-done:
		t.Fatalf("ended after RequestTimeout, not its own timeout: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	for _, r := range hs.take() {
		r.Reply(protocol.StatusOK, []byte("late"))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestClient_Call_CancelDoesNotTripBreaker(t *testing.T) {
	hs := startHoldServer(t)
	c := newClient(t, Options{BreakerFailures: 2})
	for range 10 {
		ctx, cancel := context.WithCancel(context.Background())
		before := hs.count()
		go func() {
			waitFor(t, 5*time.Second, "the request at the server", func() bool { return hs.count() > before })
			cancel()
		}()
		_, err := c.Call(ctx, hs.Addr().String(), protocol.CmdSend, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Call = %v, want context.Canceled", err)
		}
	}
	if st := c.BreakerState(hs.Addr().String()); st != gobreaker.StateClosed {
		t.Fatalf("breaker %v after cancellations", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Call(ctx, hs.Addr().String(), protocol.CmdPing, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Call with a cancelled context = %v", err)
	}
}

func TestClient_PendingFailWhenServerDies(t *testing.T) {
	hs := startHoldServer(t)
	c := newClient(t, Options{RequestTimeout: time.Minute})
	const n = 20
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := c.Call(context.Background(), hs.Addr().String(), protocol.CmdSend, nil)
			errs <- err
		}()
	}
	waitFor(t, 5*time.Second, "all requests at the server", func() bool { return hs.count() == n })
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no drain: the server drops its connections at once
	_ = hs.Close(ctx)
	for range n {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrConnClosed) || NotSent(err) {
				t.Fatalf("pending Call = %v, want ErrConnClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("pending requests not failed when the server went away")
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("pending requests failed only after %v", d)
	}
}

func TestClient_PendingFailOnRawServerDrop(t *testing.T) {
	// A server that reads one request and then drops the connection.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		buf := make([]byte, protocol.HeaderSize)
		_, _ = nc.Read(buf)
		nc.Close()
	}()
	c := newClient(t, Options{RequestTimeout: time.Minute})
	start := time.Now()
	_, err = c.Call(context.Background(), ln.Addr().String(), protocol.CmdSend, nil)
	if !errors.Is(err, ErrConnClosed) {
		t.Fatalf("Call = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("failed after %v", d)
	}
}

func TestClient_MalformedResponseClosesConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		buf := make([]byte, protocol.HeaderSize)
		_, _ = nc.Read(buf)
		_, _ = nc.Write([]byte("this is not a frame at all"))
		_, _ = nc.Read(buf) // until the client closes
	}()
	c := newClient(t, Options{RequestTimeout: time.Minute})
	if _, err := c.Call(context.Background(), ln.Addr().String(), protocol.CmdSend, nil); !errors.Is(err, ErrConnClosed) || !errors.Is(err, protocol.ErrBadMagic) {
		t.Fatalf("Call = %v", err)
	}
}

func TestClient_RedialAfterRestart(t *testing.T) {
	addr := testutil.ReusableAddr(t)
	s1 := startServer(t, addr, netserver.NewMux())
	c := newClient(t, Options{RedialBackoffMin: 10 * time.Millisecond, RedialBackoffMax: 50 * time.Millisecond, BreakerFailures: 1000})
	if _, err := c.Call(context.Background(), addr, protocol.CmdPing, nil); err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err := c.Call(context.Background(), addr, protocol.CmdPing, nil)
	if err == nil {
		t.Fatal("Call to a stopped server succeeded")
	}
	startServer(t, addr, netserver.NewMux())
	waitFor(t, 5*time.Second, "a call to the restarted server", func() bool {
		got, err := c.Call(context.Background(), addr, protocol.CmdPing, []byte("back"))
		return err == nil && string(got) == "back"
	})
}

func TestClient_BreakerOpensOnDialFailures(t *testing.T) {
	addr := testutil.ReusableAddr(t)
	c := newClient(t, Options{BreakerFailures: 3, BreakerOpenTimeout: 200 * time.Millisecond,
		RedialBackoffMin: time.Millisecond, RedialBackoffMax: time.Millisecond})
	for i := range 3 {
		_, err := c.Call(context.Background(), addr, protocol.CmdPing, nil)
		if !errors.Is(err, ErrDial) || !NotSent(err) {
			t.Fatalf("call %d = %v, want ErrDial", i, err)
		}
		time.Sleep(2 * time.Millisecond) // past the redial back-off
	}
	if st := c.BreakerState(addr); st != gobreaker.StateOpen {
		t.Fatalf("breaker %v after 3 dial failures", st)
	}
	_, err := c.Call(context.Background(), addr, protocol.CmdPing, nil)
	if !errors.Is(err, ErrBreakerOpen) || !errors.Is(err, gobreaker.ErrOpenState) || !NotSent(err) {
		t.Fatalf("Call with an open breaker = %v", err)
	}
	if err := c.Go(addr, protocol.CmdPing, nil, 0, func([]byte, error) { t.Error("callback after a refused Go") }); !errors.Is(err, ErrBreakerOpen) {
		t.Fatalf("Go with an open breaker = %v", err)
	}

	// Once the address works again, a probe closes the breaker.
	startServer(t, addr, netserver.NewMux())
	waitFor(t, 5*time.Second, "the breaker to close", func() bool {
		_, err := c.Call(context.Background(), addr, protocol.CmdPing, nil)
		return err == nil && c.BreakerState(addr) == gobreaker.StateClosed
	})
}

// TestClient_HalfOpenProbeNeedNotBeAnswered: a half-open breaker's probe
// closes it once sent; a probe the server holds (a long poll) does not keep
// the address refused until its answer.
func TestClient_HalfOpenProbeNeedNotBeAnswered(t *testing.T) {
	addr := testutil.ReusableAddr(t)
	c := newClient(t, Options{BreakerFailures: 2, BreakerOpenTimeout: 50 * time.Millisecond,
		RedialBackoffMin: time.Millisecond, RedialBackoffMax: time.Millisecond})
	for i := range 2 {
		if _, err := c.Call(context.Background(), addr, protocol.CmdPing, nil); !errors.Is(err, ErrDial) {
			t.Fatalf("call %d = %v, want ErrDial", i, err)
		}
		time.Sleep(2 * time.Millisecond) // past the redial back-off
	}
	if st := c.BreakerState(addr); st != gobreaker.StateOpen {
		t.Fatalf("breaker %v after 2 dial failures", st)
	}
	held := make(chan *netserver.Request, 1)
	mux := netserver.NewMux()
	mux.HandleFunc(protocol.CmdSend, func(r *netserver.Request) { held <- r.Detach() })
	startServer(t, addr, mux)
	time.Sleep(60 * time.Millisecond) // the breaker lets a probe through now
	answered := make(chan error, 1)
	if err := c.Go(addr, protocol.CmdSend, []byte("probe"), 5*time.Second, func(_ []byte, err error) { answered <- err }); err != nil {
		t.Fatalf("probe: %v", err)
	}
	r := <-held // the server holds the probe
	if _, err := c.Call(context.Background(), addr, protocol.CmdPing, nil); err != nil {
		t.Fatalf("call while the probe is held: %v", err)
	}
	if st := c.BreakerState(addr); st != gobreaker.StateClosed {
		t.Fatalf("breaker %v after the probe was sent and a call answered", st)
	}
	r.Reply(protocol.StatusOK, nil)
	if err := <-answered; err != nil {
		t.Fatalf("the held probe's answer: %v", err)
	}
}

func TestClient_NotifyOneWay(t *testing.T) {
	var got atomic.Int64
	mux := netserver.NewMux()
	mux.HandleFunc(protocol.CmdAck, func(r *netserver.Request) {
		if r.Header.IsOneWay() && string(r.Body) == "ack" {
			got.Add(1)
		}
	})
	s := startServer(t, "127.0.0.1:0", mux)
	c := newClient(t, Options{})
	for range 10 {
		if err := c.Notify(context.Background(), s.Addr().String(), protocol.CmdAck, []byte("ack")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "10 one-way requests served", func() bool { return got.Load() == 10 })
}

func TestClient_RequestTooLarge(t *testing.T) {
	c := newClient(t, Options{MaxFrameSize: 10})
	_, err := c.Call(context.Background(), testutil.ReusableAddr(t), protocol.CmdPing, make([]byte, 11))
	if !errors.Is(err, ErrRequestTooLarge) || !NotSent(err) {
		t.Fatalf("Call = %v", err)
	}
}

func TestClient_CloseFailsPendingAndLaterCalls(t *testing.T) {
	hs := startHoldServer(t)
	c, err := New(Options{RequestTimeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 1)
	if err := c.Go(hs.Addr().String(), protocol.CmdSend, nil, 0, func(_ []byte, err error) { errs <- err }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the request at the server", func() bool { return hs.count() == 1 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; !errors.Is(err, ErrConnClosed) || NotSent(err) {
		t.Fatalf("pending request = %v", err)
	}
	if _, err := c.Call(context.Background(), hs.Addr().String(), protocol.CmdPing, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Call after Close = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestClient_ForgetsIdleAddresses(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", netserver.NewMux())
	c := newClient(t, Options{IdleTimeout: 100 * time.Millisecond})
	if _, err := c.Call(context.Background(), s.Addr().String(), protocol.CmdPing, nil); err != nil {
		t.Fatal(err)
	}
	peers := func() int {
		c.mu.RLock()
		defer c.mu.RUnlock()
		if snap := len(*c.peerSnap.Load()); snap != len(c.peers) {
			t.Errorf("the lock-free copy has %d peers, the map %d", snap, len(c.peers))
		}
		return len(c.peers)
	}
	if peers() != 1 {
		t.Fatalf("%d peers", peers())
	}
	p := (*c.peerSnap.Load())[s.Addr().String()]
	waitFor(t, 5*time.Second, "the idle address to be forgotten", func() bool { return peers() == 0 })
	if p.open.Load() != nil {
		t.Fatal("a forgotten peer still offers its connection")
	}
	if _, err := c.Call(context.Background(), s.Addr().String(), protocol.CmdPing, nil); err != nil {
		t.Fatalf("Call after forgetting: %v", err)
	}
	if peers() != 1 {
		t.Fatalf("%d peers after the next Call", peers())
	}
}

func TestClient_ConcurrentCallers(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", netserver.NewMux())
	c := newClient(t, Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				body := []byte(fmt.Sprintf("%d-%d", g, i))
				got, err := c.Call(context.Background(), s.Addr().String(), protocol.CmdPing, body)
				if err != nil || !bytes.Equal(got, body) {
					errs <- fmt.Errorf("got %q, %v", got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestOptions_Validate(t *testing.T) {
	for _, o := range []Options{
		{DialTimeout: -1}, {RequestTimeout: -1}, {MaxFrameSize: -1},
		{RedialBackoffMin: time.Second, RedialBackoffMax: time.Millisecond},
	} {
		if err := o.Validate(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Validate(%+v) = %v", o, err)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestClient_WriteTimeoutClosesStuckConnection(t *testing.T) {
	// A server that accepts and never reads.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var (
		mu       sync.Mutex
		accepted []net.Conn
	)
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, nc := range accepted {
			nc.Close()
		}
	}()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, nc)
			mu.Unlock()
		}
	}()
	c := newClient(t, Options{WriteTimeout: 200 * time.Millisecond, RequestTimeout: time.Minute, BreakerFailures: 1 << 30})
	addr := ln.Addr().String()
	closed := make(chan struct{})
	var once sync.Once
	body := make([]byte, 1<<20)
	start := time.Now()
	for range 64 { // far more than the socket buffers hold
		_ = c.Go(addr, protocol.CmdSend, body, 0, func(_ []byte, err error) {
			if errors.Is(err, ErrConnClosed) {
				once.Do(func() { close(closed) })
			}
		})
	}
	select {
	case <-closed:
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("the stuck connection closed only after %v", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stuck connection was never closed")
	}
}

func TestClient_BreakerOpensOnTimeouts_ProbeWithBusinessErrorCloses(t *testing.T) {
	hs := startHoldServer(t) // holds CmdSend; answers CmdPing
	c := newClient(t, Options{BreakerFailures: 3, BreakerOpenTimeout: 100 * time.Millisecond})
	addr := hs.Addr().String()
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := c.Call(ctx, addr, protocol.CmdSend, nil)
		cancel()
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("Call = %v, want ErrTimeout", err)
		}
	}
	if st := c.BreakerState(addr); st != gobreaker.StateOpen {
		t.Fatalf("breaker %v after 3 timeouts", st)
	}
	if _, err := c.Call(context.Background(), addr, protocol.CmdPing, nil); !errors.Is(err, ErrBreakerOpen) {
		t.Fatalf("Call with the breaker open = %v", err)
	}
	// After the open timeout, one probe goes through; an answer (even an
	// unknown-command error) closes the breaker.
	waitFor(t, 5*time.Second, "the breaker to let a probe through", func() bool {
		_, err := c.Call(context.Background(), addr, protocol.Command(999), nil)
		return errors.Is(err, protocol.ErrUnknownCommand)
	})
	if st := c.BreakerState(addr); st != gobreaker.StateClosed {
		t.Fatalf("breaker %v after a probe got an answer", st)
	}
}

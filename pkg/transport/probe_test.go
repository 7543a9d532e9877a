package transport

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

func TestProbe_SilentConnectionReplaced(t *testing.T) {
	s := startSilentServer(t)
	addr := s.addr()
	const probe = 200 * time.Millisecond
	c := newClient(t, Options{ProbeTimeout: probe, BreakerFailures: 1 << 30})
	for _, name := range []string{"Call", "Go"} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			var err error
			if name == "Call" {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				_, err = c.Call(ctx, addr, protocol.CmdSend, []byte("x"))
				cancel()
			} else {
				done := make(chan error, 1)
				if err := c.Go(addr, protocol.CmdSend, []byte("x"), 100*time.Millisecond, func(_ []byte, err error) { done <- err }); err != nil {
					t.Fatal(err)
				}
				err = <-done
			}
			if !errors.Is(err, ErrTimeout) {
				t.Fatalf("%s = %v, want ErrTimeout", name, err)
			}
			cn := connOf(c, addr)
			if cn == nil {
				t.Fatal("no connection")
			}
			before := s.accepted.Load()
			waitFor(t, 5*time.Second, "the silent connection closed", cn.closed)
			if d := time.Since(start); d > time.Second+probe {
				t.Fatalf("closed %v after the request was sent", d)
			}
			if !errors.Is(cn.closeErr, errUnresponsive) {
				t.Fatalf("closed because %v", cn.closeErr)
			}
			// The next request dials afresh.
			_ = c.Go(addr, protocol.CmdSend, nil, time.Minute, func([]byte, error) {})
			waitFor(t, 5*time.Second, "a new connection", func() bool { return s.accepted.Load() == before+1 })
		})
	}
}

func TestProbe_LiveServerKeepsConnection(t *testing.T) {
	// A server holding requests past their timeout (as it holds a long
	// poll) but answering pings keeps its connection.
	hs := startHoldServer(t)
	addr := hs.Addr().String()
	c := newClient(t, Options{ProbeTimeout: 100 * time.Millisecond, BreakerFailures: 1 << 30})
	if _, err := c.Call(context.Background(), addr, protocol.CmdPing, nil); err != nil {
		t.Fatal(err)
	}
	cn := connOf(c, addr)
	for range 5 {
		if _, err := c.CallTimeout(context.Background(), addr, protocol.CmdSend, nil, 50*time.Millisecond); !errors.Is(err, ErrTimeout) {
			t.Fatalf("held request = %v", err)
		}
	}
	// Probes went out and came back.
	waitFor(t, 5*time.Second, "a probe answered", func() bool {
		cn.mu.Lock()
		defer cn.mu.Unlock()
		return !cn.probing && cn.nextID > 6
	})
	time.Sleep(300 * time.Millisecond) // three probe timeouts
	if cn.closed() || connOf(c, addr) != cn {
		t.Fatalf("the connection to a live server was replaced: %v", cn.closeErr)
	}
	// A long poll that is answered in time triggers nothing.
	res := make(chan error, 1)
	if err := c.Go(addr, protocol.CmdSend, []byte("poll"), 5*time.Second, func(_ []byte, err error) { res <- err }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the poll held", func() bool { return hs.count() == 6 })
	time.Sleep(300 * time.Millisecond)
	for _, r := range hs.take() {
		r.Reply(protocol.StatusOK, nil)
	}
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	if cn.closed() {
		t.Fatal("closed")
	}
}

func TestProbe_NegativeNeverProbes(t *testing.T) {
	s := startSilentServer(t)
	addr := s.addr()
	c := newClient(t, Options{ProbeTimeout: -1, BreakerFailures: 1 << 30})
	if _, err := c.CallTimeout(context.Background(), addr, protocol.CmdSend, nil, 50*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatal(err)
	}
	cn := connOf(c, addr)
	time.Sleep(200 * time.Millisecond)
	if cn.closed() {
		t.Fatal("closed without probing")
	}
}

func TestProbe_RecoversAfterSilentCutHeals(t *testing.T) {
	target := startServer(t, "127.0.0.1:0", netserver.NewMux())
	proxy := startCutProxy(t, target.Addr().String())
	addr := proxy.addr()
	c := newClient(t, Options{ProbeTimeout: 300 * time.Millisecond, RequestTimeout: 300 * time.Millisecond,
		DialTimeout: 500 * time.Millisecond, RedialBackoffMax: 200 * time.Millisecond, BreakerOpenTimeout: 100 * time.Millisecond})
	ctx := context.Background()
	if _, err := c.Call(ctx, addr, protocol.CmdPing, nil); err != nil {
		t.Fatal(err)
	}
	proxy.setCut(true)
	if _, err := c.Call(ctx, addr, protocol.CmdPing, nil); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Call across the cut = %v", err)
	}
	proxy.setCut(false)
	healed := time.Now()
	for {
		_, err := c.Call(ctx, addr, protocol.CmdPing, nil)
		if err == nil {
			break
		}
		if time.Since(healed) > 5*time.Second {
			t.Fatalf("still failing %v after the heal: %v", time.Since(healed), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The probe's timeout and a dial: well within 2 s.
	if d := time.Since(healed); d > 2*time.Second {
		t.Fatalf("recovered %v after the heal", d)
	}
}

package netserver

import (
	"errors"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/busypoll"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// pingPong sends n pings one at a time on c, each as soon as the last was
// answered, and checks the answers.
func pingPong(t *testing.T, c *rawConn, n int) {
	t.Helper()
	for i := range n {
		id := uint64(100 + i)
		c.send(t, protocol.AppendRequest(nil, protocol.CmdPing, id, []byte("p")))
		if f := c.readFrame(t); f.Header.RequestID != id || string(f.Body) != "p" {
			t.Fatalf("ping %d answered %+v %q", id, f.Header, f.Body)
		}
	}
}

// TestSpin_CatchesTheNextRequestOfALoneConnection checks that a loop whose
// only connection had every request answered inline polls it for the next
// one, that the polls see requests sent right after an answer, and that the
// loop still answers requests sent after a poll gave up.
func TestSpin_CatchesTheNextRequestOfALoneConnection(t *testing.T) {
	// Spin far past what Validate allows (set before Start): whether a spin
	// catches a request depends on how fast this test's client turns
	// around, and under -race on a loaded machine that took more than 1 ms
	// often enough to miss every spin.
	s := startServer(t, Options{EventLoops: 1, Spin: time.Millisecond}, NewMux(),
		func(srv *Server) { srv.opts.Spin = 500 * time.Millisecond })
	c := dial(t, s)
	pingPong(t, c, 50)
	spins, caught := s.spins.Load(), s.spinsCaught.Load()
	if spins < busypoll.GiveUp {
		t.Fatalf("the lone connection's loop spun after %d of 50 answers", spins)
	}
	if caught < 40 {
		t.Fatalf("the spins saw %d of 50 requests sent right after their answers", caught)
	}
	t.Logf("%d spins, %d saw the next request", spins, caught)
}

// TestSpin_NotWithOtherConnectionsOrRequestsInFlight checks that a loop
// does not spin while it has other connections (their requests would
// wait), nor while a request is still with a handler (its reply is written
// by the loop), nor with Spin turned off.
func TestSpin_NotWithOtherConnectionsOrRequestsInFlight(t *testing.T) {
	release := make(chan struct{})
	mux := NewMux()
	mux.HandleFunc(protocol.CmdSend, func(r *Request) {
		<-release
		r.Reply(protocol.StatusOK)
	})
	s := startServer(t, Options{EventLoops: 1, Spin: time.Millisecond}, mux)
	a, b := dial(t, s), dial(t, s)
	waitFor(t, 5*time.Second, "two connections", func() bool { return s.conns.Load() == 2 })
	pingPong(t, a, 10)
	if n := s.spins.Load(); n != 0 {
		t.Fatalf("spun %d times with two connections open", n)
	}
	b.Close()
	waitFor(t, 5*time.Second, "one connection", func() bool { return s.conns.Load() == 1 })

	a.send(t, protocol.AppendRequest(nil, protocol.CmdSend, 1, nil)) // held by its handler
	waitFor(t, 5*time.Second, "the send held", func() bool { return s.busy.Load() == 1 })
	pingPong(t, a, 10)
	if n := s.spins.Load(); n != 0 {
		t.Fatalf("spun %d times with a request in flight", n)
	}
	close(release)
	if f := a.readFrame(t); f.Header.RequestID != 1 || f.Header.Status() != protocol.StatusOK {
		t.Fatalf("held send answered %+v", f.Header)
	}
	waitFor(t, 5*time.Second, "nothing held", func() bool { return s.busy.Load() == 0 })
	pingPong(t, a, 10)
	if n := s.spins.Load(); n < busypoll.GiveUp {
		t.Fatalf("spun %d times after 10 answers with nothing in flight", n)
	}

	off := startServer(t, Options{EventLoops: 1, Spin: -1}, NewMux())
	pingPong(t, dial(t, off), 10)
	if n := off.spins.Load(); n != 0 {
		t.Fatalf("spun %d times with Spin off", n)
	}
}

func TestSpin_ValidateRejectsLongSpins(t *testing.T) {
	err := Options{Spin: 2 * time.Millisecond}.Validate()
	if !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("Validate of a 2ms spin: %v", err)
	}
	if err := (Options{Spin: -1}).Validate(); err != nil {
		t.Fatalf("Validate of spin off: %v", err)
	}
}

// TestSpin_StopsWhileItMisses checks that a connection whose requests come
// later than Spin stops spinning after busypoll.GiveUp misses (a client far
// away costs a few spins, not one per request) and then only probes, once
// every busypoll.Probe answered reads.
func TestSpin_StopsWhileItMisses(t *testing.T) {
	s := startServer(t, Options{EventLoops: 1, Spin: time.Millisecond}, NewMux())
	c := dial(t, s)
	for range 2*busypoll.Probe + 10 { // slower than the spin
		pingPong(t, c, 1)
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.spins.Load(); n < busypoll.GiveUp || n > busypoll.GiveUp+4 {
		t.Fatalf("%d spins for %d requests slower than the spin, want %d misses and a probe or two",
			n, 2*busypoll.Probe+10, busypoll.GiveUp)
	}
}

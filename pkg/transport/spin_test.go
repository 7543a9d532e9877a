package transport

import (
	"context"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/busypoll"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// TestClient_SpinCatchesQuickAnswers: with Spin set, a lone Call polls for
// its answer and sees a quick one come; without it, it never spins.
func TestClient_SpinCatchesQuickAnswers(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", netserver.NewMux()) // answers pings on its loop
	for _, spin := range []time.Duration{0, 20 * time.Millisecond} {
		c := newClient(t, Options{Spin: spin})
		for i := range 100 {
			got, err := c.Call(context.Background(), s.Addr().String(), protocol.CmdPing, []byte("hi"))
			if err != nil || string(got) != "hi" {
				t.Fatalf("spin %v, call %d: %q, %v", spin, i, got, err)
			}
		}
		spins, caught := c.spins.Load(), c.spinsCaught.Load()
		t.Logf("spin %v: %d spins, %d caught the answer", spin, spins, caught)
		if spin == 0 && spins != 0 {
			t.Fatalf("spun %d times with Spin 0", spins)
		}
		// Each Call's answer comes long before 20 ms, so every spin but a
		// rare one (the first, before the connection's first read) sees it.
		if spin > 0 && (spins < 90 || caught < spins-5) {
			t.Fatalf("spin %v: %d spins of 100 calls, %d caught", spin, spins, caught)
		}
	}
}

// TestClient_SpinGivesUpOnSlowAnswers: a server that answers later than the
// spin costs GiveUp spins, then one probe every Probe calls.
func TestClient_SpinGivesUpOnSlowAnswers(t *testing.T) {
	mux := netserver.NewMux()
	mux.HandleFunc(protocol.CmdPing, func(r *netserver.Request) {
		time.Sleep(3 * time.Millisecond)
		r.Reply(protocol.StatusOK, r.Body)
	})
	s := startServer(t, "127.0.0.1:0", mux)
	c := newClient(t, Options{Spin: 200 * time.Microsecond})
	const calls = busypoll.GiveUp + busypoll.Probe + 4
	for i := range calls {
		if _, err := c.Call(context.Background(), s.Addr().String(), protocol.CmdPing, nil); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if spins, caught := c.spins.Load(), c.spinsCaught.Load(); caught != 0 || spins != busypoll.GiveUp+1 {
		t.Fatalf("%d calls answered after 3 ms: %d spins (want %d), %d caught", calls, spins, busypoll.GiveUp+1, caught)
	}
}

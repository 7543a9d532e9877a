package netserver

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// Serve workers are reused: a thousand requests sent one after another, each
// its own batch, on connections taking turns, are served by a few workers,
// not a goroutine each; and every request is answered in order.
func TestServer_ServeWorkers_Reused(t *testing.T) {
	mux := NewMux()
	mux.HandleFunc(protocol.CmdPing, Ping) // off the loop
	s := startServer(t, Options{}, mux)
	conns := []*rawConn{dial(t, s), dial(t, s), dial(t, s)}
	for i := range 1000 {
		c := conns[i%len(conns)]
		body := []byte(fmt.Sprint(i))
		c.send(t, protocol.AppendRequest(nil, protocol.CmdPing, uint64(i), body))
		f := c.readFrame(t)
		if f.Header.Status() != protocol.StatusOK || f.Header.RequestID != uint64(i) || string(f.Body) != string(body) {
			t.Fatalf("request %d answered %+v %q", i, f.Header, f.Body)
		}
	}
	if n := s.workersStarted.Load(); n > 10 {
		t.Fatalf("%d serve workers started for 1000 requests one at a time; want a few reused", n)
	}
}

// Concurrent connections get workers of their own (one connection's slow
// handler does not hold another's requests), and each connection's
// requests are still served one at a time, in order.
func TestServer_ServeWorkers_OneConnDoesNotBlockAnother(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	mux := NewMux()
	mux.HandleFunc(protocol.CmdPing, func(r *Request) {
		if string(r.Body) == "slow" {
			<-release
		}
		Ping(r)
	})
	s := startServer(t, Options{}, mux)
	defer once.Do(func() { close(release) })
	slow, fast := dial(t, s), dial(t, s)
	slow.send(t, protocol.AppendRequest(nil, protocol.CmdPing, 1, []byte("slow")))
	slow.send(t, protocol.AppendRequest(nil, protocol.CmdPing, 2, []byte("after slow")))
	for i := range 50 {
		fast.send(t, protocol.AppendRequest(nil, protocol.CmdPing, uint64(10+i), []byte("fast")))
		if f := fast.readFrame(t); f.Header.RequestID != uint64(10+i) {
			t.Fatalf("fast connection answered %+v, want request %d", f.Header, 10+i)
		}
	}
	if _, err := slow.tryReadFrame(20 * time.Millisecond); err == nil {
		t.Fatal("the slow connection answered before its handler returned")
	}
	once.Do(func() { close(release) })
	for _, id := range []uint64{1, 2} {
		if f := slow.readFrame(t); f.Header.RequestID != id {
			t.Fatalf("slow connection answered %+v, want request %d", f.Header, id)
		}
	}
}

// A parked serve worker exits once it has waited workerIdle without work,
// and the next batch starts a new one.
func TestServer_ServeWorkers_ExitWhenIdle(t *testing.T) {
	mux := NewMux()
	mux.HandleFunc(protocol.CmdPing, Ping)
	s, err := New(Options{}, mux, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.workerIdle = 20 * time.Millisecond
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: s}
	t.Cleanup(func() { _ = s.Close(t.Context()) })
	c := dial(t, ts)
	c.send(t, protocol.AppendRequest(nil, protocol.CmdPing, 1, nil))
	c.readFrame(t)
	if n := s.workersStarted.Load(); n != 1 {
		t.Fatalf("%d serve workers started, want 1", n)
	}
	waitFor(t, 5*time.Second, "the idle worker to exit", func() bool { return s.workersLive.Load() == 0 })
	c.send(t, protocol.AppendRequest(nil, protocol.CmdPing, 2, nil))
	if f := c.readFrame(t); f.Header.RequestID != 2 {
		t.Fatalf("answered %+v, want request 2", f.Header)
	}
	if n := s.workersStarted.Load(); n != 2 {
		t.Fatalf("%d serve workers started, want 2 (the first exited)", n)
	}
}

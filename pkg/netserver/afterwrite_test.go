package netserver

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// afterWriteFunc adapts a function to AfterWriter for tests.
type afterWriteFunc func()

func (f afterWriteFunc) AfterWrite() { f() }

// Work an inline handler leaves with AfterWrite runs once its reply is on
// the socket: here it waits until the client has read the reply, which
// could never happen if it ran before the loop's write.
func TestRequest_AfterWrite_RunsOnceTheReplyIsWritten(t *testing.T) {
	clientRead := make(chan struct{})
	var sawReply, ran atomic.Int64
	mux := NewMux()
	mux.HandleInline(protocol.CmdSend, HandlerFunc(func(r *Request) {
		r.Reply(protocol.StatusOK, r.Body)
		r.AfterWrite(afterWriteFunc(func() {
			select {
			case <-clientRead:
				sawReply.Add(1)
			case <-time.After(5 * time.Second):
			}
			ran.Add(1)
		}))
	}))
	s := startServer(t, Options{}, mux)
	c := dial(t, s)
	c.send(t, protocol.AppendRequest(nil, protocol.CmdSend, 1, []byte("first")))
	if f := c.readFrame(t); string(f.Body) != "first" {
		t.Fatalf("reply %q", f.Body)
	}
	close(clientRead)
	waitFor(t, 10*time.Second, "the after-write work", func() bool { return ran.Load() == 1 })
	if sawReply.Load() != 1 {
		t.Fatal("the after-write work ran before the client could read the reply")
	}
	// The next read's requests are served after it, in order, and each
	// request's work runs once.
	c.send(t, protocol.AppendRequest(protocol.AppendRequest(nil, protocol.CmdSend, 2, []byte("a")), protocol.CmdSend, 3, []byte("b")))
	for _, want := range []string{"a", "b"} {
		if f := c.readFrame(t); string(f.Body) != want {
			t.Fatalf("reply %q, want %q", f.Body, want)
		}
	}
	waitFor(t, 5*time.Second, "three after-write runs", func() bool { return ran.Load() == 3 })
}

// Off the event loop (a handler on a serve goroutine) AfterWrite runs at
// once; a panic in the work is logged, and the server stays up.
func TestRequest_AfterWrite_OffLoopAndPanics(t *testing.T) {
	var ran atomic.Int64
	mux := NewMux()
	mux.HandleFunc(protocol.CmdSend, func(r *Request) {
		r.AfterWrite(afterWriteFunc(func() { ran.Add(1) }))
		if ran.Load() != 1 {
			r.Reply(protocol.StatusInternal, []byte("AfterWrite off the loop did not run at once"))
			return
		}
		r.Reply(protocol.StatusOK, nil)
	})
	mux.HandleInline(protocol.CmdLookup, HandlerFunc(func(r *Request) {
		r.Reply(protocol.StatusOK, nil)
		r.AfterWrite(afterWriteFunc(func() { panic("after-write boom") }))
	}))
	s := startServer(t, Options{}, mux)
	c := dial(t, s)
	c.send(t, protocol.AppendRequest(nil, protocol.CmdSend, 1, nil))
	if f := c.readFrame(t); f.Header.Status() != protocol.StatusOK {
		t.Fatalf("off-loop send: %v %s", f.Header.Status(), f.Body)
	}
	c.send(t, protocol.AppendRequest(nil, protocol.CmdLookup, 2, nil))
	if f := c.readFrame(t); f.Header.Status() != protocol.StatusOK {
		t.Fatalf("inline lookup: %v", f.Header.Status())
	}
	waitFor(t, 5*time.Second, "the panic logged", func() bool { return s.logs.FilterMessage("after-write panic").Len() == 1 })
	ping(t, s)
}

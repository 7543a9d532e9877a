package netserver

import (
	"context"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// An inline handler that detaches its request answers later from another
// goroutine; the body it kept is its own copy; Close waits for the answer.
func TestRequest_DetachAnswersLater(t *testing.T) {
	release := make(chan struct{})
	mux := NewMux()
	mux.HandleInline(protocol.CmdSend, HandlerFunc(func(r *Request) {
		d := r.Detach()
		go func() {
			<-release
			d.Reply(protocol.StatusOK, d.Body)
		}()
	}))
	s := startServer(t, Options{}, mux)
	c := dial(t, s)
	c.send(t, protocol.AppendRequest(nil, protocol.CmdSend, 7, []byte("kept body")))
	c.send(t, protocol.AppendRequest(nil, protocol.CmdPing, 8, []byte("ping")))
	if f := c.readFrame(t); f.Header.RequestID != 8 {
		t.Fatalf("first answer is to request %d, want the ping (8)", f.Header.RequestID)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close(context.Background()) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a detached request was unanswered")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	f := c.readFrame(t)
	if f.Header.RequestID != 7 || string(f.Body) != "kept body" {
		t.Fatalf("detached answer: id %d body %q", f.Header.RequestID, f.Body)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

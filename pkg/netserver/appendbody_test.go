package netserver

import (
	"bytes"
	"testing"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// testAppender appends body, announcing announced bytes.
type testAppender struct {
	body      []byte
	announced int
}

func (a testAppender) BodyLen() int                 { return a.announced }
func (a testAppender) AppendBody(dst []byte) []byte { return append(dst, a.body...) }

// TestRequest_ReplyAppend answers through an appender on the event loop
// (an inline handler) and off it, pipelined behind other replies: each body
// arrives whole and in its own frame. A body over MaxFrameSize and one that
// appends a length other than it announced become StatusInternal errors,
// and the connection goes on.
func TestRequest_ReplyAppend(t *testing.T) {
	body := func(id uint64) []byte { return bytes.Repeat([]byte{byte(id)}, 100+int(id)) }
	mux := NewMux()
	mux.HandleInline(protocol.CmdBrokerStats, HandlerFunc(func(r *Request) {
		b := body(r.Header.RequestID)
		r.ReplyAppend(protocol.StatusOK, testAppender{b, len(b)})
	}))
	mux.HandleFunc(protocol.CmdPull, func(r *Request) {
		id := r.Header.RequestID
		b := body(id)
		switch id {
		case 100: // over MaxFrameSize
			r.ReplyAppend(protocol.StatusOK, testAppender{nil, 4 << 10})
		case 101: // announces less than it appends
			r.ReplyAppend(protocol.StatusOK, testAppender{b, len(b) - 1})
		default:
			go r.ReplyAppend(protocol.StatusOK, testAppender{b, len(b)})
		}
	})
	s := startServer(t, Options{MaxFrameSize: 1 << 10}, mux)
	c := dial(t, s)
	var reqs []byte
	for id := uint64(1); id <= 40; id++ {
		cmd := protocol.CmdPull
		if id%2 == 0 {
			cmd = protocol.CmdBrokerStats
		}
		reqs = protocol.AppendRequest(reqs, cmd, id, nil)
	}
	reqs = protocol.AppendRequest(reqs, protocol.CmdPull, 100, nil)
	reqs = protocol.AppendRequest(reqs, protocol.CmdPull, 101, nil)
	reqs = protocol.AppendRequest(reqs, protocol.CmdBrokerStats, 102, nil)
	c.send(t, reqs)
	got := map[uint64]protocol.Frame{}
	for range 43 {
		f := c.readFrame(t)
		got[f.Header.RequestID] = f
	}
	for id := uint64(1); id <= 40; id++ {
		if f := got[id]; f.Header.Status() != protocol.StatusOK || !bytes.Equal(f.Body, body(id)) {
			t.Fatalf("reply to %d: status %v, %d bytes, want %d", id, f.Header.Status(), len(f.Body), len(body(id)))
		}
	}
	for _, id := range []uint64{100, 101} {
		if f := got[id]; f.Header.Status() != protocol.StatusInternal || len(f.Body) == 0 {
			t.Fatalf("reply to %d: status %v, body %q; want StatusInternal with a message", id, f.Header.Status(), f.Body)
		}
	}
	if f := got[102]; f.Header.Status() != protocol.StatusOK || !bytes.Equal(f.Body, body(102)) {
		t.Fatalf("reply after the errors: status %v, %d bytes", f.Header.Status(), len(f.Body))
	}
}

package netserver

import (
	"bytes"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// retainedBodies returns the body slices of request id's reply: small ones
// (copied) around two large ones (kept), their bytes derived from id.
func retainedBodies(id uint64) [][]byte {
	large := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i) ^ seed ^ byte(id)
		}
		return b
	}
	head := binary.BigEndian.AppendUint64([]byte("head"), id)
	return [][]byte{head, large(64<<10+int(id), 1), []byte("mid"), large(minRetainedBody, 2), nil, []byte("tail")}
}

// TestRequest_ReplyRetained_WritesBodiesInPlace pipelines requests whose
// replies mix copied and kept slices (several replies per flush, so one
// writev carries many), checks every reply byte for byte, and that each
// release runs once, after which the test scribbles over the bodies: a body
// written late would arrive scribbled.
func TestRequest_ReplyRetained_WritesBodiesInPlace(t *testing.T) {
	const requests = 64
	var mu sync.Mutex
	released := map[uint64]int{}
	mux := NewMux()
	mux.HandleFunc(protocol.CmdPull, func(r *Request) {
		id := r.Header.RequestID
		body := retainedBodies(id)
		go r.ReplyRetained(protocol.StatusOK, func() {
			mu.Lock()
			released[id]++
			mu.Unlock()
			for _, b := range body {
				for i := range b {
					b[i] = 0xEE
				}
			}
		}, body...)
	})
	s := startServer(t, Options{}, mux)
	c := dial(t, s)
	var reqs []byte
	for id := uint64(1); id <= requests; id++ {
		reqs = protocol.AppendRequest(reqs, protocol.CmdPull, id, nil)
	}
	c.send(t, reqs)
	for range requests {
		f := c.readFrame(t)
		want := bytes.Join(retainedBodies(f.Header.RequestID), nil)
		if f.Header.Status() != protocol.StatusOK || !bytes.Equal(f.Body, want) {
			t.Fatalf("reply to %d: status %v, %d bytes, want %d bytes as sent", f.Header.RequestID, f.Header.Status(), len(f.Body), len(want))
		}
	}
	waitFor(t, 5*time.Second, "every release", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(released) == requests
	})
	mu.Lock()
	defer mu.Unlock()
	for id, n := range released {
		if n != 1 {
			t.Fatalf("request %d released %d times", id, n)
		}
	}
}

// TestRequest_ReplyRetained_ReleasedWhenDropped: a one-way request, a
// second reply and a reply after the client left each release at once.
func TestRequest_ReplyRetained_ReleasedWhenDropped(t *testing.T) {
	got := make(chan *Request, 2)
	s := startServer(t, Options{}, HandlerFunc(func(r *Request) { got <- r }))
	c := dial(t, s)
	var releases atomic.Int64
	release := func() { releases.Add(1) }
	big := make([]byte, 64<<10)

	c.send(t, protocol.AppendHeader(nil, protocol.Header{Version: protocol.Version, Flags: protocol.FlagOneWay,
		Code: uint16(protocol.CmdAck), RequestID: 1}))
	(<-got).ReplyRetained(protocol.StatusOK, release, big)
	if n := releases.Load(); n != 1 {
		t.Fatalf("one-way reply: %d releases, want 1", n)
	}

	c.send(t, protocol.AppendRequest(nil, protocol.CmdPull, 2, nil))
	r := <-got
	r.ReplyRetained(protocol.StatusOK, release, big)
	r.ReplyRetained(protocol.StatusOK, release, big) // dropped
	if f := c.readFrame(t); f.Header.RequestID != 2 || len(f.Body) != len(big) {
		t.Fatalf("reply %+v with %d bytes", f.Header, len(f.Body))
	}
	waitFor(t, 5*time.Second, "the written reply's release", func() bool { return releases.Load() == 3 })

	c.send(t, protocol.AppendRequest(nil, protocol.CmdPull, 3, nil))
	r = <-got
	c.Close()
	<-r.Done()
	r.ReplyRetained(protocol.StatusOK, release, big)
	if n := releases.Load(); n != 4 {
		t.Fatalf("reply after close: %d releases, want 4", n)
	}
}

// TestRequest_ReplyRetained_ReleasedOnClose: a client that never reads
// fills the server's outbound limit with kept bodies; once the server
// closes the connection every reply has been released exactly once
// (written, or dropped with the connection).
func TestRequest_ReplyRetained_ReleasedOnClose(t *testing.T) {
	const limit = 256 << 10
	var replies, releases atomic.Int64
	mux := NewMux()
	mux.HandleFunc(protocol.CmdPull, func(r *Request) {
		replies.Add(1)
		r.ReplyRetained(protocol.StatusOK, func() { releases.Add(1) }, make([]byte, 64<<10))
	})
	s := startServer(t, Options{MaxOutboundBytes: limit}, mux)
	slow := dial(t, s)
	deadline := time.Now().Add(10 * time.Second)
	for id := uint64(1); ; id++ {
		_ = slow.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := slow.Write(protocol.AppendRequest(nil, protocol.CmdPull, id, nil)); err != nil {
			break
		}
		if id%64 == 0 && len(s.logs.FilterMessage("closing connection").All()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server never closed a client that does not read")
		}
	}
	s.waitLog(t, "MaxOutboundBytes")
	slow.waitClosed(t)
	waitFor(t, 5*time.Second, "every reply released", func() bool {
		return replies.Load() > 0 && releases.Load() == replies.Load()
	})
	ping(t, s)
}

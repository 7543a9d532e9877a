package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// FuzzClientResponses has a server answer a request with arbitrary bytes,
// split at arbitrary points, then hang up. Whatever the bytes, the call
// must end (with a body, a *protocol.Error or ErrConnClosed) and the client
// must not crash or leak.
func FuzzClientResponses(f *testing.F) {
	ok := protocol.AppendResponse(nil, protocol.StatusOK, 1, []byte("fine"))
	f.Add(ok, []byte{3, 7})
	f.Add(protocol.AppendResponse(nil, protocol.StatusReadonly, 1, []byte("ro")), []byte{})
	f.Add(append(protocol.AppendResponse(nil, protocol.StatusOK, 9, nil), ok...), []byte{1, 1, 1})
	f.Add(protocol.AppendRequest(nil, protocol.CmdPing, 1, nil), []byte{})
	f.Add(protocol.AppendHeader(nil, protocol.Header{Version: 1, Flags: protocol.FlagResponse, RequestID: 1, BodyLen: 1 << 31}), []byte{})
	f.Add([]byte("garbage"), []byte{2})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { ln.Close() })
	c, err := New(Options{RequestTimeout: 5 * time.Second, MaxFrameSize: 1 << 20, BreakerFailures: 1 << 30,
		RedialBackoffMin: time.Microsecond, RedialBackoffMax: time.Microsecond}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { c.Close() })

	f.Fuzz(func(t *testing.T, data, splits []byte) {
		served := make(chan struct{})
		go func() {
			defer close(served)
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			defer nc.Close()
			hb := make([]byte, protocol.HeaderSize+1)
			if _, err := io.ReadFull(nc, hb); err != nil { // the request: 18 + 1 byte
				return
			}
			rest := data
			for _, s := range splits {
				if len(rest) == 0 {
					break
				}
				n := min(int(s)+1, len(rest))
				if _, err := nc.Write(rest[:n]); err != nil {
					return
				}
				rest = rest[n:]
			}
			_, _ = nc.Write(rest)
		}()
		done := make(chan error, 1)
		go func() {
			_, err := c.Call(context.Background(), ln.Addr().String(), protocol.CmdSend, []byte{1})
			done <- err
		}()
		select {
		case err := <-done:
			var pe *protocol.Error
			if err != nil && !errors.As(err, &pe) && !errors.Is(err, ErrConnClosed) && !errors.Is(err, ErrDial) {
				t.Fatalf("Call = %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the call did not end after the server hung up")
		}
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Fatal("the server side did not finish")
		}
		// The connection is dropped (the server hung up); forget it so the
		// next input starts on a fresh one.
		c.mu.RLock()
		p := c.peers[ln.Addr().String()]
		c.mu.RUnlock()
		if p != nil {
			p.closeConn(errors.New("next input"))
		}
	})
}

package transport

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"unsafe"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// TestClient_GoInto_ReadsIntoTheCallersBuffer pipelines echoes of small
// bodies (read with others of the same read), large ones (read straight
// from the socket) and ones larger than their buffer, beside plain Go
// requests: a body that fits lands in the caller's buffer, the others are
// allocated, and every body is the one sent.
func TestClient_GoInto_ReadsIntoTheCallersBuffer(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", netserver.NewMux()) // Ping echoes
	c := newClient(t, Options{})
	addr := s.Addr().String()
	pattern := func(n, seed int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + seed)
		}
		return b
	}
	type want struct {
		body    []byte
		into    []byte
		inPlace bool
	}
	var cases []want
	for i, n := range []int{1, 100, 4 << 10, 60 << 10, 200 << 10, 1 << 20} {
		cases = append(cases,
			want{body: pattern(n, i), into: make([]byte, 0, n+i), inPlace: true}, // fits
			want{body: pattern(n, i+50), into: make([]byte, 0, n-1)},             // too small
			want{body: pattern(n, i+100)})                                        // plain Go
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(cases))
	for i := range cases {
		w := cases[i]
		wg.Add(1)
		err := c.GoInto(addr, protocol.CmdPing, w.body, w.into, 0, func(body []byte, err error) {
			defer wg.Done()
			switch {
			case err != nil:
				errs <- fmt.Errorf("case %d: %w", i, err)
			case !bytes.Equal(body, w.body):
				errs <- fmt.Errorf("case %d: %d bytes back, not the %d sent", i, len(body), len(w.body))
			case w.inPlace != (unsafe.SliceData(body) == unsafe.SliceData(w.into)):
				errs <- fmt.Errorf("case %d (%d bytes into cap %d): read into the buffer %v, want %v",
					i, len(body), cap(w.into), !w.inPlace, w.inPlace)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestClient_GoInto_StatusErrorLeavesTheBuffer: an error response's message
// is not read into the buffer.
func TestClient_GoInto_StatusErrorLeavesTheBuffer(t *testing.T) {
	mux := netserver.NewMux()
	mux.HandleFunc(protocol.CmdSend, func(r *netserver.Request) {
		r.ReplyError(protocol.Errorf(protocol.StatusReadonly, "read only"))
	})
	s := startServer(t, "127.0.0.1:0", mux)
	c := newClient(t, Options{})
	into := make([]byte, 0, 64)
	done := make(chan error, 1)
	if err := c.GoInto(s.Addr().String(), protocol.CmdSend, []byte("x"), into, 0, func(body []byte, err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	err := <-done
	var pe *protocol.Error
	if !errors.As(err, &pe) || !errors.Is(err, protocol.ErrReadonly) || pe.Message != "read only" {
		t.Fatalf("got %v, want the readonly status with its message", err)
	}
	if got := into[:len("read only")]; bytes.Equal(got, []byte("read only")) {
		t.Fatal("the error message was read into the caller's buffer")
	}
}

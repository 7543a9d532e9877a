package transport

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

func TestWriteQueue_ChunksKeepOrderAndAreReused(t *testing.T) {
	var q writeQueue
	var want []byte
	for i := range 40 {
		b := bytes.Repeat([]byte{byte(i)}, 100_000+i*1_000) // frames span chunks
		q.append(b)
		want = append(want, b...)
	}
	bufs := q.take(nil)
	if len(bufs) < 4 {
		t.Fatalf("%d chunks for %d bytes", len(bufs), len(want))
	}
	if got := bytes.Join(bufs, nil); !bytes.Equal(got, want) {
		t.Fatalf("queued %d bytes, took %d, or in another order", len(want), len(got))
	}
	if !q.empty() {
		t.Fatal("not empty after take")
	}
	q.recycle(bufs)
	if len(q.spare) == 0 {
		t.Fatal("no chunk kept for reuse")
	}
	q.append(make([]byte, writeChunk+1))
	if got := q.take(nil); len(got) != 2 || cap(got[0]) != writeChunk {
		t.Fatalf("second fill: %d chunks", len(got))
	}
}

// TestClient_LargeConcurrentBodiesEcho pipelines bodies larger than a write
// chunk from many callers (Call and Go, whose caller reuses its body as soon
// as Go returns) and checks every echo.
func TestClient_LargeConcurrentBodiesEcho(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", netserver.NewMux())
	c := newClient(t, Options{})
	addr := s.Addr().String()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := make([]byte, 200_000+g*37_000)
			for i := range 12 {
				for k := range body {
					body[k] = byte(g*31 + i*7 + k)
				}
				if g%2 == 0 {
					got, err := c.Call(context.Background(), addr, protocol.CmdPing, body)
					if err != nil || !bytes.Equal(got, body) {
						errs <- fmt.Errorf("call %d/%d: %d bytes back, %v", g, i, len(got), err)
						return
					}
					continue
				}
				want := bytes.Clone(body)
				done := make(chan error, 1)
				err := c.Go(addr, protocol.CmdPing, body, 0, func(got []byte, err error) {
					if err == nil && !bytes.Equal(got, want) {
						err = fmt.Errorf("go %d/%d: echo differs", g, i)
					}
					done <- err
				})
				clear(body) // Go copied it
				if err == nil {
					err = <-done
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

package transport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

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
	bufs, chunks := q.take(nil, nil)
	if len(chunks) < 4 {
		t.Fatalf("%d chunks for %d bytes", len(chunks), len(want))
	}
	if got := bytes.Join(bufs, nil); !bytes.Equal(got, want) {
		t.Fatalf("queued %d bytes, took %d, or in another order", len(want), len(got))
	}
	if !q.empty() {
		t.Fatal("not empty after take")
	}
	q.recycle(chunks)
	if len(q.spare) == 0 {
		t.Fatal("no chunk kept for reuse")
	}
	q.append(make([]byte, writeChunk+1))
	if _, got := q.take(nil, nil); len(got) != 2 || cap(got[0]) != writeChunk {
		t.Fatalf("second fill: %d chunks", len(got))
	}
}

func TestWriteQueue_BorrowedSegmentsInOrder(t *testing.T) {
	var q writeQueue
	big := bytes.Repeat([]byte("b"), minBorrow)
	q.append([]byte("h1"))
	i := q.borrow(big)
	q.append([]byte("h2"))
	j := q.borrow(big)
	q.append([]byte("t"))
	q.unborrow(j)
	big[0] = 'X' // segment i is the caller's; segment j a copy
	segs, _ := q.take(nil, nil)
	want := "h1X" + string(big[1:]) + "h2b" + string(big[1:]) + "t"
	if got := string(bytes.Join(segs, nil)); got != want || i != 1 || j != 3 {
		t.Fatalf("took %d bytes (segments %d, %d), want %d", len(got), i, j, len(want))
	}
	if q.takes != 1 || !q.empty() {
		t.Fatalf("takes %d, empty %v", q.takes, q.empty())
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

// TestClient_CancelledCallBodyIsCopied queues a Call's large body behind a
// write the server does not read, cancels the Call and overwrites the body:
// what the server then reads is the body as it was sent.
func TestClient_CancelledCallBodyIsCopied(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if nc, err := ln.Accept(); err == nil {
			accepted <- nc
		}
	}()
	c := newClient(t, Options{})
	addr := ln.Addr().String()

	// A: a body larger than the socket buffers, whose write blocks.
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	bodyA := bytes.Repeat([]byte("a"), 12<<20)
	doneA := make(chan error, 1)
	go func() {
		_, err := c.Call(ctxA, addr, protocol.CmdSend, bodyA)
		doneA <- err
	}()
	srv := <-accepted
	defer srv.Close()
	var cn *conn
	waitFor(t, 5*time.Second, "A's write under way", func() bool {
		p := (*c.peerSnap.Load())[addr]
		if p == nil {
			return false
		}
		p.mu.Lock()
		cn = p.conn
		p.mu.Unlock()
		if cn == nil {
			return false
		}
		cn.mu.Lock()
		defer cn.mu.Unlock()
		return cn.writing
	})

	// B: queued behind A's write, borrowed, then cancelled.
	bodyB := bytes.Repeat([]byte("b"), 2*minBorrow)
	ctxB, cancelB := context.WithCancel(context.Background())
	doneB := make(chan error, 1)
	go func() {
		_, err := c.Call(ctxB, addr, protocol.CmdSend, bodyB)
		doneB <- err
	}()
	waitFor(t, 5*time.Second, "B queued", func() bool {
		cn.mu.Lock()
		defer cn.mu.Unlock()
		return cn.pending.len() == 2
	})
	cancelB()
	if err := <-doneB; !errors.Is(err, context.Canceled) {
		t.Fatalf("B: %v", err)
	}
	clear(bodyB) // B's Call returned: the body is the caller's again

	// The server reads both frames: B's body is as sent.
	br := bufio.NewReaderSize(srv, 1<<20)
	for _, want := range [][]byte{bodyA, bytes.Repeat([]byte("b"), 2*minBorrow)} {
		hdr := make([]byte, protocol.HeaderSize)
		if _, err := io.ReadFull(br, hdr); err != nil {
			t.Fatal(err)
		}
		h, err := protocol.ParseHeader(hdr, 16<<20)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, h.BodyLen)
		if _, err := io.ReadFull(br, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("request %d: %d bytes, not as sent", h.RequestID, len(got))
		}
	}
	cancelA()
	if err := <-doneA; !errors.Is(err, context.Canceled) {
		t.Fatalf("A: %v", err)
	}
}

package netserver

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// A tlsSocket's writes never block: what a peer that does not read leaves
// unsent waits, in order, until flushPending writes it once the peer
// reads.
func TestTLSSocket_WritesNeverBlock(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server := <-accepted
	defer server.Close()
	// A small send buffer, so that a little is more than the socket holds
	// (the client's receive buffer does not grow while it does not read).
	_ = server.(*net.TCPConn).SetWriteBuffer(8 << 10)

	woken := make(chan struct{}, 1)
	sock, err := newTLSSocket(server, func() {
		select {
		case woken <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	sock.async = true

	// More than the socket buffers hold, and the client reads nothing.
	var want bytes.Buffer
	start := time.Now()
	for i := range 32 {
		chunk := bytes.Repeat([]byte{byte(i)}, 32<<10)
		want.Write(chunk)
		if n, err := sock.Write(chunk); err != nil || n != len(chunk) {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("writes took %v: they blocked", d)
	}
	if sock.unsent() == 0 {
		t.Fatal("1 MiB fit in the socket buffers: the test proves nothing")
	}
	select {
	case <-woken:
	default:
		t.Fatal("the writer was not woken for the pending bytes")
	}

	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(client, int64(want.Len())))
		got <- b
	}()
	if err := sock.flushPending(); err != nil {
		t.Fatal(err)
	}
	if sock.unsent() != 0 {
		t.Fatalf("%d bytes still unsent after flushPending", sock.unsent())
	}
	if b := <-got; !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("the client read %d bytes, not the %d written in order", len(b), want.Len())
	}
}

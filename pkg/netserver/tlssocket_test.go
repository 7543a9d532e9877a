package netserver

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection, closed when the
// test ends.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
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
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// A tlsSocket's writes never block: what a peer that does not read leaves
// unsent waits, in order, until flushPending writes it once the peer
// reads.
func TestTLSSocket_WritesNeverBlock(t *testing.T) {
	client, server := tcpPair(t)
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

// Writes made while a tlsSocket gathers reach the socket only at release,
// all with one write(2), and in the order they were made, before any
// write that follows.
func TestTLSSocket_GatherWritesOnce(t *testing.T) {
	client, server := tcpPair(t)
	_ = server.(*net.TCPConn).SetWriteBuffer(4 << 20)
	sock, err := newTLSSocket(server, func() {})
	if err != nil {
		t.Fatal(err)
	}
	sock.async = true

	var want bytes.Buffer
	sock.gather()
	for i := range 4 {
		chunk := bytes.Repeat([]byte{byte('a' + i)}, 16<<10)
		want.Write(chunk)
		if n, err := sock.Write(chunk); err != nil || n != len(chunk) {
			t.Fatalf("gathered write %d: %d, %v", i, n, err)
		}
	}
	_ = client.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var one [1]byte
	if n, _ := client.Read(one[:]); n > 0 {
		t.Fatal("a gathered write reached the socket before release")
	}
	_ = client.SetReadDeadline(time.Time{})
	if err := sock.release(); err != nil {
		t.Fatal(err)
	}
	after := bytes.Repeat([]byte{'z'}, 100)
	want.Write(after)
	if _, err := sock.Write(after); err != nil {
		t.Fatal(err)
	}
	if err := sock.flushPending(); err != nil {
		t.Fatal(err)
	}
	sock.mu.Lock()
	calls := sock.syscalls
	sock.mu.Unlock()
	// One write for the gathered 64 KiB (two if the socket took part of
	// it at first), one for the write after release.
	if calls > 3 {
		t.Fatalf("%d write calls for 4 gathered writes and one more", calls)
	}
	got, err := io.ReadAll(io.LimitReader(client, int64(want.Len())))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("the client read other bytes, or in another order, than were written")
	}
}

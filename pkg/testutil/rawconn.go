package testutil

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// RawConn speaks frames directly, one request at a time: for what a
// client library would not send (commands after a refused CmdAuth, say).
type RawConn struct {
	t  testing.TB
	nc net.Conn
	id uint64
}

// DialRaw connects to addr (plaintext TCP); the connection is closed when
// the test ends.
func DialRaw(t testing.TB, addr string) *RawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &RawConn{t: t, nc: nc}
}

// Call sends one request and returns its answer's status and body; any
// failure to exchange the frames fails the test.
func (c *RawConn) Call(cmd protocol.Command, body []byte) (protocol.Status, string) {
	c.t.Helper()
	c.id++
	_ = c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(protocol.AppendRequest(nil, cmd, c.id, body)); err != nil {
		c.t.Fatalf("write: %v", err)
	}
	var hdr [protocol.HeaderSize]byte
	if _, err := io.ReadFull(c.nc, hdr[:]); err != nil {
		c.t.Fatalf("read: %v", err)
	}
	h, err := protocol.ParseHeader(hdr[:], 64<<20)
	if err != nil || !h.IsResponse() || h.RequestID != c.id {
		c.t.Fatalf("answer %+v: %v", h, err)
	}
	resp := make([]byte, h.BodyLen)
	if _, err := io.ReadFull(c.nc, resp); err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return h.Status(), string(resp)
}

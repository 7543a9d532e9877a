package netserver

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// TestServer_KeepAlive reads the keep-alive settings of the server's side
// of a connection: TCPKeepAlive as the idle time, probes every fifth of it,
// five of them; off with a negative TCPKeepAlive.
func TestServer_KeepAlive(t *testing.T) {
	for _, tc := range []struct {
		name   string
		period time.Duration
		want   [4]int // SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT
	}{
		{"30s", 30 * time.Second, [4]int{1, 30, 6, 5}},
		{"off", -1, [4]int{0, -1, -1, -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan [4]int, 1)
			mux := NewMux()
			mux.HandleFunc(protocol.CmdPing, func(r *Request) {
				fd := r.Conn.fd
				var v [4]int
				v[0], _ = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE)
				v[1], v[2], v[3] = -1, -1, -1
				if v[0] == 1 {
					v[1], _ = unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
					v[2], _ = unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL)
					v[3], _ = unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPCNT)
				}
				got <- v
				r.Reply(protocol.StatusOK)
			})
			s := startServer(t, Options{Addr: "127.0.0.1:0", TCPKeepAlive: tc.period}, mux)
			c := dial(t, s)
			defer c.Close()
			c.send(t, protocol.AppendRequest(nil, protocol.CmdPing, 1, nil))
			c.readFrame(t)
			if v := <-got; v != tc.want {
				t.Fatalf("keep-alive (on, idle, interval, count) = %v, want %v", v, tc.want)
			}
		})
	}
}

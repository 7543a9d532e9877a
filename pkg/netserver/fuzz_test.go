package netserver

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// FuzzServerFraming writes arbitrary bytes, split at arbitrary points, to a
// live server. Whatever the bytes, the server must answer what is well
// formed, close the connection on what is not (or when the client leaves),
// keep serving new clients, and leave no connection or request behind.
func FuzzServerFraming(f *testing.F) {
	valid := protocol.AppendRequest(nil, protocol.CmdPing, 1, []byte("hello"))
	valid = protocol.AppendRequest(valid, protocol.CmdPull, 2, []byte("later"))
	valid = protocol.AppendRequest(valid, protocol.Command(777), 3, nil)
	oneWay := protocol.AppendHeader(nil, protocol.Header{Version: protocol.Version, Flags: protocol.FlagOneWay,
		Code: uint16(protocol.CmdPing), RequestID: 4})
	f.Add(valid, []byte{3, 9, 1})
	f.Add(append(valid, oneWay...), []byte{1})
	f.Add(valid[:25], []byte{})
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"), []byte{2})
	f.Add(protocol.AppendHeader(nil, protocol.Header{Version: 1, BodyLen: 1 << 30}), []byte{5})
	f.Add(protocol.AppendResponse(nil, protocol.StatusOK, 1, nil), []byte{})

	mux := NewMux()
	mux.HandleFunc(protocol.CmdPull, func(r *Request) {
		go func() {
			time.Sleep(time.Millisecond)
			r.Reply(protocol.StatusOK, r.Body)
		}()
	})
	srv := startServer(f, Options{MaxFrameSize: 64 << 10}, mux)
	f.Fuzz(func(t *testing.T, data, splits []byte) {
		nc, err := net.DialTimeout("tcp", srv.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.(*net.TCPConn).SetNoDelay(true)
		rest := data
		for _, s := range splits {
			if len(rest) == 0 {
				break
			}
			n := min(int(s)+1, len(rest))
			if _, err := nc.Write(rest[:n]); err != nil {
				break // the server closed the connection
			}
			rest = rest[n:]
		}
		if len(rest) > 0 {
			_, _ = nc.Write(rest)
		}
		_ = nc.(*net.TCPConn).CloseWrite()
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.Copy(io.Discard, nc)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the server kept a finished connection open")
		}
		nc.Close()

		ping(t, srv)
		waitFor(t, 10*time.Second, "no connections or requests left", func() bool {
			return srv.conns.Load() == 0 && srv.busy.Load() == 0
		})
	})
}

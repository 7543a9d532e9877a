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
// live server, over plain TCP and over TLS (whose reader keeps partial
// frames its own way; each split is a TLS record of its own). Whatever the
// bytes, the server must answer what is well formed, close the connection
// on what is not (or when the client leaves), keep serving new clients,
// and leave no connection, request or partial frame behind.
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
	large := protocol.AppendRequest(nil, protocol.CmdPull, 5, make([]byte, 64<<10)) // over ReadBufferSize: chunks
	f.Add(append(large, valid...), []byte{17, 200, 255, 255, 3})
	f.Add(large[:40000], []byte{255, 255})

	mux := NewMux()
	mux.HandleFunc(protocol.CmdPull, func(r *Request) {
		go func() {
			time.Sleep(time.Millisecond)
			r.Reply(protocol.StatusOK, r.Body)
		}()
	})
	srv := startServer(f, Options{MaxFrameSize: 64 << 10, ReadBufferSize: 32 << 10}, mux)
	tlsSrv := startServer(f, Options{MaxFrameSize: 64 << 10, ReadBufferSize: 32 << 10}, mux, withTLS(f))
	f.Fuzz(func(t *testing.T, data, splits []byte) {
		for _, s := range []*testServer{srv, tlsSrv} {
			fuzzConn(t, s, data, splits)
		}
	})
}

// fuzzConn writes data to s in pieces of splits' sizes, ends its side,
// reads until the server closes, and checks that the server is still well.
func fuzzConn(t *testing.T, srv *testServer, data, splits []byte) {
	c, err := tryDial(srv)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.tcp().SetNoDelay(true)
	rest := data
	for _, s := range splits {
		if len(rest) == 0 {
			break
		}
		n := min(int(s)+1, len(rest))
		if _, err := c.Write(rest[:n]); err != nil {
			break // the server closed the connection
		}
		rest = rest[n:]
	}
	if len(rest) > 0 {
		_, _ = c.Write(rest)
	}
	_ = c.closeWrite()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server kept a finished connection open")
	}
	c.Close()

	ping(t, srv)
	waitFor(t, 10*time.Second, "no connections, requests or partial frames left", func() bool {
		st := srv.Stats()
		return st.Conns == 0 && st.InFlight == 0 && st.PartialBytes == 0
	})
}

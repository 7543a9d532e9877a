package netserver

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"testing"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// BenchmarkServer_Pipelined writes batches of 128 ping requests on one
// connection and reads the 128 replies, through the inline ping and through
// an off-loop handler, for several body sizes; BenchmarkServer_PipelinedTLS
// does the same over TLS.
func BenchmarkServer_Pipelined(b *testing.B) { benchPipelinedSizes(b, false) }

func BenchmarkServer_PipelinedTLS(b *testing.B) { benchPipelinedSizes(b, true) }

func benchPipelinedSizes(b *testing.B, overTLS bool) {
	for _, size := range []int{64, 1024, 16 << 10} {
		for _, offLoop := range []bool{false, true} {
			name := "inline"
			if offLoop {
				name = "handler"
			}
			b.Run(name+"/"+byteSize(size), func(b *testing.B) { benchPipelined(b, size, offLoop, overTLS) })
		}
	}
}

func byteSize(n int) string {
	if n >= 1024 {
		return strconv.Itoa(n/1024) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

func benchPipelined(b *testing.B, size int, offLoop, overTLS bool) {
	mux := NewMux()
	if offLoop {
		mux.HandleFunc(protocol.CmdPing, Ping)
	}
	var before []func(*Server)
	if overTLS {
		before = append(before, withTLS(b))
	}
	s := startServer(b, Options{}, mux, before...)
	nc := dial(b, s).Conn
	const window = 128
	var batch []byte
	body := make([]byte, size)
	for i := range window {
		batch = protocol.AppendRequest(batch, protocol.CmdPing, uint64(i), body)
	}
	b.SetBytes(int64(size))
	sendWindows(b, nc, batch, window, window*(protocol.HeaderSize+size), 256<<10)
}

// sendWindows writes batch (window requests) and reads its replies
// (replyBytes in all, through a reader of readBuffer bytes) until b.N
// requests are answered, timing only that.
func sendWindows(b *testing.B, nc net.Conn, batch []byte, window, replyBytes, readBuffer int) {
	br := bufio.NewReaderSize(nc, readBuffer)
	reply := make([]byte, replyBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; sent += window {
		if _, err := nc.Write(batch); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(br, reply); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkServer_RequestAtATime sends one ping and waits for its echo,
// over plaintext and over TLS.
func BenchmarkServer_RequestAtATime(b *testing.B) {
	for _, overTLS := range []bool{false, true} {
		name := "plain"
		if overTLS {
			name = "tls"
		}
		b.Run(name, func(b *testing.B) {
			var before []func(*Server)
			if overTLS {
				before = append(before, withTLS(b))
			}
			s := startServer(b, Options{}, NewMux(), before...)
			c := dial(b, s)
			frame := protocol.AppendRequest(nil, protocol.CmdPing, 1, make([]byte, 64))
			reply := make([]byte, len(frame))
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(frame); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c.br, reply); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkServer_LargeFrames sends frames of ~280 KB (a send batch of
// 256 × 1 KiB), four in flight on one connection, to an off-loop handler
// that answers with 8 bytes and releases the body: with the frame pool,
// and without it (every frame a new buffer). Poisoning is off (it is on in
// test binaries, and would cost a fill per frame).
func BenchmarkServer_LargeFrames(b *testing.B) {
	for _, pool := range []bool{true, false} {
		name, opts := "pool", Options{}
		if !pool {
			name, opts = "new", Options{FramePoolBytes: -1}
		}
		b.Run(name, func(b *testing.B) {
			mux := NewMux()
			mux.HandleFunc(protocol.CmdSend, func(r *Request) {
				r.Reply(protocol.StatusOK, r.Body[:8])
				r.Release()
			})
			s := startServer(b, opts, mux, func(s *Server) { s.frames.poison = false })
			nc := dial(b, s).Conn
			const size, window = 280 << 10, 4
			frame := protocol.AppendRequest(nil, protocol.CmdSend, 1, make([]byte, size))
			var batch []byte
			for range window {
				batch = append(batch, frame...)
			}
			b.SetBytes(size)
			sendWindows(b, nc, batch, window, window*(protocol.HeaderSize+8), 4<<10)
		})
	}
}

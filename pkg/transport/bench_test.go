package transport

import (
	"context"
	"sync"
	"testing"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// startPingServer starts a netserver answering pings on its event loop, or
// through an ordinary off-loop handler when offLoop is set.
func startPingServer(b testing.TB, offLoop bool) string {
	mux := netserver.NewMux()
	if offLoop {
		mux.HandleFunc(protocol.CmdPing, netserver.Ping)
	}
	srv, err := netserver.New(netserver.Options{}, mux, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Close(context.Background()) })
	return srv.Addr().String()
}

// BenchmarkCallSync is one request in flight on one connection.
func BenchmarkCallSync(b *testing.B) {
	addr := startPingServer(b, false)
	c, err := New(Options{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	body := make([]byte, 64)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Call(context.Background(), addr, protocol.CmdPing, body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGoPipelined keeps 128 requests in flight on each of 4
// connections (one Client each), as the rpc bench suite does.
func BenchmarkGoPipelined(b *testing.B) {
	b.Run("inline", func(b *testing.B) { benchPipelined(b, startPingServer(b, false)) })
	b.Run("handler", func(b *testing.B) { benchPipelined(b, startPingServer(b, true)) })
}

func benchPipelined(b *testing.B, addr string) {
	const conns, window = 4, 128
	body := make([]byte, 64)
	clients := make([]*Client, conns)
	for i := range clients {
		c, err := New(Options{}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Call(context.Background(), addr, protocol.CmdPing, body); err != nil {
			b.Fatal(err)
		}
		clients[i] = c
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		left = b.N
	)
	take := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if left == 0 {
			return false
		}
		left--
		return true
	}
	for _, c := range clients {
		for range window {
			var next func([]byte, error)
			send := func() {
				if !take() {
					wg.Done()
					return
				}
				if err := c.Go(addr, protocol.CmdPing, body, 0, next); err != nil {
					b.Error(err)
					wg.Done()
				}
			}
			next = func(_ []byte, err error) {
				if err != nil {
					b.Error(err)
				}
				send()
			}
			wg.Add(1)
			send()
		}
	}
	wg.Wait()
}

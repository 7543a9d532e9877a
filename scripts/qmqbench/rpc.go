package main

// The rpc suite: a ping request through pkg/netserver and pkg/transport,
// side by side with a plain net server that the suite runs as the baseline.
//
// Three servers answer CmdPing frames with the request's body, all in this
// process on loopback:
//
//   - netserver with NewMux, which answers pings itself on the event loop
//     (the server's own ping path; replies are coalesced into one write per
//     read);
//   - netserver with the ping registered as an ordinary handler
//     (Mux.HandleFunc), so each read's requests go to the connection's
//     serve goroutine and the replies come back through an AsyncWritev
//     flush, the path every real handler takes;
//   - the baseline: a goroutine per connection with bufio on both sides
//     that flushes when no more input is buffered.
//
// All three are driven by the same pkg/transport clients: one Client per
// connection (a Client keeps one connection per address), each keeping a
// fixed number of requests in flight with Client.Go. Client and servers
// share the machine's two cores, the same way for every server, so the
// ratios compare like with like. The machine is shared and noisy, so the
// suite runs several short rounds, rotating the order of the servers in
// each, and each figure sums all of its rounds.
//
//	rpc_pipelined_req_per_s              netserver (ping on the loop), 4 connections x 128 in flight, 64-byte payloads
//	rpc_net_pipelined_req_per_s          the net baseline, same workload
//	rpc_vs_net_ratio                     the two above, ours / baseline
//	rpc_handler_pipelined_req_per_s      netserver with ping as an off-loop handler, same workload
//	rpc_handler_vs_net_ratio             that / baseline
//	rpc_sync_req_per_s                   netserver (ping on the loop), 1 connection, 1 request in flight (Call)
//	rpc_handler_sync_req_per_s           the same through the off-loop handler

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
)

const (
	rpcConns       = 4
	rpcWindow      = 128
	rpcPayload     = 64
	rpcRounds      = 6
	rpcRoundLength = time.Second
	rpcSyncLength  = 2 * time.Second
)

func init() { register("rpc", runRPC) }

func runRPC(env *Env) error {
	inline, err := startPingServer(netserver.NewMux())
	if err != nil {
		return err
	}
	defer inline.Close(context.Background())
	offLoop := netserver.NewMux()
	offLoop.HandleFunc(protocol.CmdPing, netserver.Ping)
	handler, err := startPingServer(offLoop)
	if err != nil {
		return err
	}
	defer handler.Close(context.Background())
	base, err := startNetEcho("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer base.Close()

	type target struct {
		name string
		addr string
		rate rpcRate
	}
	targets := []*target{
		{name: "netserver", addr: inline.Addr().String()},
		{name: "handler", addr: handler.Addr().String()},
		{name: "net", addr: base.Addr().String()},
	}
	for round := range rpcRounds {
		for i := range targets {
			t := targets[(round+i)%len(targets)]
			n, d, err := pipelined(t.addr, rpcConns, rpcWindow, rpcPayload, rpcRoundLength)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", t.name, round, err)
			}
			t.rate.add(n, d)
			env.Logf("round %d %-9s %.0f req/s", round, t.name, float64(n)/d.Seconds())
		}
	}
	syncN, syncD, err := synchronous(targets[0].addr, rpcPayload, rpcSyncLength)
	if err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	hSyncN, hSyncD, err := synchronous(targets[1].addr, rpcPayload, rpcSyncLength)
	if err != nil {
		return fmt.Errorf("handler sync: %w", err)
	}
	ours, offLoopRate, theirs := targets[0].rate.perSecond(), targets[1].rate.perSecond(), targets[2].rate.perSecond()
	env.Metric("rpc_pipelined_req_per_s", ours, "req/s")
	env.Metric("rpc_net_pipelined_req_per_s", theirs, "req/s")
	env.Metric("rpc_vs_net_ratio", ours/theirs, "x")
	env.Metric("rpc_handler_pipelined_req_per_s", offLoopRate, "req/s")
	env.Metric("rpc_handler_vs_net_ratio", offLoopRate/theirs, "x")
	env.Metric("rpc_sync_req_per_s", float64(syncN)/syncD.Seconds(), "req/s")
	env.Metric("rpc_handler_sync_req_per_s", float64(hSyncN)/hSyncD.Seconds(), "req/s")
	return nil
}

func startPingServer(h netserver.Handler) (*netserver.Server, error) {
	srv, err := netserver.New(netserver.Options{Addr: "127.0.0.1:0"}, h, nil)
	if err != nil {
		return nil, err
	}
	if err := srv.Start(); err != nil {
		return nil, err
	}
	return srv, nil
}

type rpcRate struct {
	n int64
	d time.Duration
}

func (r *rpcRate) add(n int64, d time.Duration) { r.n += n; r.d += d }
func (r *rpcRate) perSecond() float64           { return float64(r.n) / r.d.Seconds() }

// pipelined keeps window pings in flight on each of conns connections for
// length and returns how many completed and how long that took.
func pipelined(addr string, conns, window, payload int, length time.Duration) (int64, time.Duration, error) {
	var (
		completed atomic.Int64
		stop      atomic.Bool
		wg        sync.WaitGroup
		errOnce   sync.Once
		firstErr  error
	)
	fail := func(err error) { errOnce.Do(func() { firstErr = err; stop.Store(true) }) }
	body := make([]byte, payload)
	clients := make([]*transport.Client, conns)
	for i := range clients {
		c, err := transport.New(transport.Options{}, nil)
		if err != nil {
			return 0, 0, err
		}
		defer c.Close()
		// Warm up: dial and check the echo.
		got, err := c.Call(context.Background(), addr, protocol.CmdPing, body)
		if err != nil {
			return 0, 0, err
		}
		if len(got) != payload {
			return 0, 0, fmt.Errorf("ping echoed %d bytes, want %d", len(got), payload)
		}
		clients[i] = c
	}
	start := time.Now()
	for _, c := range clients {
		for range window {
			wg.Add(1)
			var next func(b []byte, err error)
			send := func() {
				if err := c.Go(addr, protocol.CmdPing, body, 0, next); err != nil {
					fail(err)
					wg.Done()
				}
			}
			next = func(b []byte, err error) {
				if err != nil {
					fail(err)
					wg.Done()
					return
				}
				completed.Add(1)
				if stop.Load() {
					wg.Done()
					return
				}
				send()
			}
			send()
		}
	}
	time.Sleep(length)
	stop.Store(true)
	wg.Wait()
	return completed.Load(), time.Since(start), firstErr
}

// synchronous sends one ping at a time for length.
func synchronous(addr string, payload int, length time.Duration) (int64, time.Duration, error) {
	c, err := transport.New(transport.Options{}, nil)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	body := make([]byte, payload)
	ctx := context.Background()
	if _, err := c.Call(ctx, addr, protocol.CmdPing, body); err != nil {
		return 0, 0, err
	}
	var n int64
	start := time.Now()
	for time.Since(start) < length {
		if _, err := c.Call(ctx, addr, protocol.CmdPing, body); err != nil {
			return n, time.Since(start), err
		}
		n++
	}
	return n, time.Since(start), nil
}

// netEcho is the baseline: a plain net server, one goroutine per
// connection, answering every request frame with its own body.
type netEcho struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func startNetEcho(addr string) (*netEcho, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	e := &netEcho{ln: ln, conns: map[net.Conn]struct{}{}}
	e.wg.Add(1)
	go e.acceptLoop()
	return e, nil
}

func (e *netEcho) Addr() net.Addr { return e.ln.Addr() }

func (e *netEcho) acceptLoop() {
	defer e.wg.Done()
	for {
		nc, err := e.ln.Accept()
		if err != nil {
			return
		}
		e.mu.Lock()
		e.conns[nc] = struct{}{}
		e.mu.Unlock()
		e.wg.Add(1)
		go e.serveLoop(nc)
	}
}

func (e *netEcho) serveLoop(nc net.Conn) {
	defer e.wg.Done()
	defer func() {
		nc.Close()
		e.mu.Lock()
		delete(e.conns, nc)
		e.mu.Unlock()
	}()
	br := bufio.NewReaderSize(nc, 64<<10)
	bw := bufio.NewWriterSize(nc, 64<<10)
	hdr := make([]byte, protocol.HeaderSize)
	var body []byte
	for {
		if _, err := io.ReadFull(br, hdr); err != nil {
			return
		}
		h, err := protocol.ParseHeader(hdr, 0)
		if err != nil {
			return
		}
		if cap(body) < int(h.BodyLen) {
			body = make([]byte, h.BodyLen)
		}
		body = body[:h.BodyLen]
		if _, err := io.ReadFull(br, body); err != nil {
			return
		}
		out := protocol.AppendHeader(hdr[:0], protocol.Header{Version: protocol.Version,
			Flags: protocol.FlagResponse, Code: uint16(protocol.StatusOK), RequestID: h.RequestID, BodyLen: h.BodyLen})
		if _, err := bw.Write(out); err != nil {
			return
		}
		if _, err := bw.Write(body); err != nil {
			return
		}
		if br.Buffered() == 0 {
			if err := bw.Flush(); err != nil && !errors.Is(err, net.ErrClosed) {
				return
			}
		}
	}
}

func (e *netEcho) Close() error {
	err := e.ln.Close()
	e.mu.Lock()
	for nc := range e.conns {
		nc.Close()
	}
	e.mu.Unlock()
	e.wg.Wait()
	return err
}

package main

// The rpc suite: a ping request through pkg/netserver and pkg/transport,
// side by side with a plain net server that the suite runs as the baseline.
//
// Both servers run in this process and answer CmdPing frames with the
// request's body: ours is netserver with its Mux (the ping handler runs off
// the event loop, as every real handler does, and replies are coalesced),
// the baseline is a goroutine per connection with bufio on both sides that
// flushes when no more input is buffered. Both are driven by the same
// pkg/transport clients: one Client per connection (a Client keeps one
// connection per address), each keeping a fixed number of requests in flight
// with Client.Go. Client and servers share the machine's cores, as they do
// for the baseline, so the ratio compares like with like. Rounds alternate
// between the two servers to spread the noise of a shared machine evenly;
// each figure sums all its rounds.
//
//	rpc_pipelined_req_per_s      netserver, 4 connections x 128 in flight, 64-byte payloads
//	rpc_net_pipelined_req_per_s  the net baseline, same workload
//	rpc_vs_net_ratio             the two above, ours / baseline
//	rpc_sync_req_per_s           netserver, 1 connection, 1 request in flight (Call)

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
	rpcRounds      = 3
	rpcRoundLength = 2 * time.Second
	rpcSyncLength  = 2 * time.Second
)

func init() { register("rpc", runRPC) }

func runRPC(env *Env) error {
	srv, err := netserver.New(netserver.Options{Addr: "127.0.0.1:0"}, netserver.NewMux(), nil)
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	defer srv.Close(context.Background())

	base, err := startNetEcho("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer base.Close()

	ours, theirs := rpcRate{}, rpcRate{}
	for round := range rpcRounds {
		order := []struct {
			addr string
			into *rpcRate
			name string
		}{{srv.Addr().String(), &ours, "netserver"}, {base.Addr().String(), &theirs, "net"}}
		if round%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, o := range order {
			n, d, err := pipelined(o.addr, rpcConns, rpcWindow, rpcPayload, rpcRoundLength)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", o.name, round, err)
			}
			o.into.add(n, d)
			env.Logf("round %d %-9s %.0f req/s", round, o.name, float64(n)/d.Seconds())
		}
	}
	n, d, err := synchronous(srv.Addr().String(), rpcPayload, rpcSyncLength)
	if err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	env.Metric("rpc_pipelined_req_per_s", ours.perSecond(), "req/s")
	env.Metric("rpc_net_pipelined_req_per_s", theirs.perSecond(), "req/s")
	env.Metric("rpc_vs_net_ratio", ours.perSecond()/theirs.perSecond(), "x")
	env.Metric("rpc_sync_req_per_s", float64(n)/d.Seconds(), "req/s")
	return nil
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

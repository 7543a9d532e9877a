package main

// The rpc suite: a ping request through pkg/netserver and pkg/transport,
// side by side with a plain net server that the suite runs as the baseline.
//
// Three servers answer CmdPing frames with the request's body, on loopback:
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
// The servers run in a child process (this binary re-executed with
// QMQBENCH_RPC_SERVERS=1), the clients in this one, as servers and clients
// run in production; both processes share the machine's two cores, the
// same way for every server, so the ratios compare like with like. (With
// everything in one process the gnet loop competes for the Go scheduler's
// two Ps with the client's goroutines each time it returns from epoll_wait.)
// All three are driven by the same pkg/transport clients: one Client per
// connection (a Client keeps one connection per address), each keeping a
// fixed number of requests in flight with Client.Go. The machine is shared
// and noisy, so the suite runs several short rounds, rotating the order of
// the servers in each. Each rate sums all of its rounds; each ratio is the
// median over rounds of the ratio within the round (the ratio of the sums
// is printed as a note on stderr).
//
//	rpc_pipelined_req_per_s              netserver (ping on the loop), 4 connections x 128 in flight, 64-byte payloads
//	rpc_net_pipelined_req_per_s          the net baseline, same workload
//	rpc_vs_net_ratio                     the two above, ours / baseline
//	rpc_handler_pipelined_req_per_s      netserver with ping as an off-loop handler, same workload
//	rpc_handler_vs_net_ratio             that / baseline
//	rpc_sync_req_per_s                   netserver (ping on the loop), 1 connection, 1 request in flight (Call)
//	rpc_handler_sync_req_per_s           the same through the off-loop handler
//	rpc_net_sync_req_per_s               the baseline, 1 connection, 1 request in flight
//
// TLS against plaintext, through the same netserver servers with and
// without Options.TLS, driven by a small client of this file (rawClient:
// one writer and one reader goroutine per connection, writes coalesced)
// over net.Conn or crypto/tls alike, since pkg/transport speaks plaintext
// only; each ratio is the median over rounds of TLS / plaintext:
//
//	rpc_tls_pipelined_req_per_s          ping on the loop over TLS, 4 connections x 128 in flight
//	rpc_tls_vs_plain_pipelined_ratio     that / the same over plaintext
//	rpc_tls_handler_pipelined_req_per_s  ping as an off-loop handler over TLS, same workload
//	rpc_tls_vs_plain_handler_ratio       that / the same over plaintext
//	rpc_tls_sync_req_per_s               ping on the loop over TLS, 1 connection, 1 request in flight
//	rpc_tls_vs_plain_sync_ratio          that / the same over plaintext

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
)

const (
	rpcConns           = 4
	rpcWindow          = 128
	rpcPayload         = 64
	rpcRounds          = 10
	rpcRoundLength     = 600 * time.Millisecond
	rpcSyncRounds      = 3
	rpcSyncRoundLength = 400 * time.Millisecond
	rpcTLSRounds       = 10
)

// rpcServersEnv makes this binary run the suite's servers instead of a
// suite (see rpcServersMain).
const rpcServersEnv = "QMQBENCH_RPC_SERVERS"

func init() {
	register("rpc", runRPC)
	if os.Getenv(rpcServersEnv) == "1" {
		os.Exit(rpcServersMain())
	}
}

// rpcServersMain runs in the child process: it starts the servers (the
// three of the plaintext comparison, then the inline and handler ones over
// TLS), prints their addresses on one line, and serves until its stdin
// closes.
func rpcServersMain() int {
	cert, err := selfSignedCert()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rpc servers:", err)
		return 1
	}
	tlsConf := &tls.Config{Certificates: []tls.Certificate{cert}}
	offLoop := netserver.NewMux()
	offLoop.HandleFunc(protocol.CmdPing, netserver.Ping)
	var servers []*netserver.Server
	var addrs []string
	for _, s := range []struct {
		h   netserver.Handler
		tls *tls.Config
	}{{netserver.NewMux(), nil}, {offLoop, nil}, {netserver.NewMux(), tlsConf}, {offLoop, tlsConf}} {
		srv, err := startPingServer(s.h, s.tls)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rpc servers:", err)
			return 1
		}
		servers = append(servers, srv)
		addrs = append(addrs, srv.Addr().String())
	}
	base, err := startNetEcho("127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "rpc servers:", err)
		return 1
	}
	fmt.Printf("%s %s %s %s %s\n", addrs[0], addrs[1], base.Addr(), addrs[2], addrs[3])
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		_ = srv.Close(ctx)
	}
	_ = base.Close()
	return 0
}

// selfSignedCert makes a certificate for 127.0.0.1 signed by itself: the
// benchmark's clients do not verify it (InsecureSkipVerify), the
// handshake and the record encryption are what it measures.
func selfSignedCert() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "qmqbench"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// startRPCServers starts the child process and returns the servers'
// addresses and a function that stops it.
func startRPCServers() (addrs []string, stop func() error, err error) {
	addrs, _, stop, err = startChild(rpcServersEnv, 5)
	return addrs, stop, err
}

// startChild starts this binary with env set to 1, reads the n addresses
// its first line prints, and returns them with the process and a function
// that stops it (closing its stdin).
func startChild(env string, n int) (addrs []string, proc *os.Process, stop func() error, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, err
	}
	stop = func() error {
		stdin.Close()
		return cmd.Wait()
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = stop()
		return nil, nil, nil, fmt.Errorf("servers (%s) did not start: %w", env, err)
	}
	addrs = strings.Fields(line)
	if len(addrs) != n {
		_ = stop()
		return nil, nil, nil, fmt.Errorf("servers (%s) printed %q", env, line)
	}
	return addrs, cmd.Process, stop, nil
}

func runRPC(env *Env) error {
	addrs, stop, err := startRPCServers()
	if err != nil {
		return err
	}
	defer stop()

	type target struct {
		name   string
		addr   string
		rate   rpcRate   // pipelined, summed over rounds
		rounds []float64 // pipelined req/s of each round
		sync   rpcRate
	}
	targets := []*target{
		{name: "netserver", addr: addrs[0]},
		{name: "handler", addr: addrs[1]},
		{name: "net", addr: addrs[2]},
	}
	for round := range rpcRounds {
		for i := range targets {
			t := targets[(round+i)%len(targets)]
			n, d, err := pipelined(t.addr, rpcConns, rpcWindow, rpcPayload, rpcRoundLength)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", t.name, round, err)
			}
			t.rate.add(n, d)
			t.rounds = append(t.rounds, float64(n)/d.Seconds())
			env.Logf("round %d %-9s %.0f req/s", round, t.name, float64(n)/d.Seconds())
		}
	}
	for round := range rpcSyncRounds {
		for i := range targets {
			t := targets[(round+i)%len(targets)]
			n, d, err := synchronous(t.addr, rpcPayload, rpcSyncRoundLength)
			if err != nil {
				return fmt.Errorf("%s sync: %w", t.name, err)
			}
			t.sync.add(n, d)
		}
	}
	ours, offLoop, base := targets[0], targets[1], targets[2]
	env.Logf("ratios of the sums over all rounds: netserver %.3f, handler %.3f",
		ours.rate.perSecond()/base.rate.perSecond(), offLoop.rate.perSecond()/base.rate.perSecond())
	env.Metric("rpc_pipelined_req_per_s", ours.rate.perSecond(), "req/s")
	env.Metric("rpc_net_pipelined_req_per_s", base.rate.perSecond(), "req/s")
	env.Metric("rpc_vs_net_ratio", medianRatio(ours.rounds, base.rounds), "x")
	env.Metric("rpc_handler_pipelined_req_per_s", offLoop.rate.perSecond(), "req/s")
	env.Metric("rpc_handler_vs_net_ratio", medianRatio(offLoop.rounds, base.rounds), "x")
	env.Metric("rpc_sync_req_per_s", ours.sync.perSecond(), "req/s")
	env.Metric("rpc_handler_sync_req_per_s", offLoop.sync.perSecond(), "req/s")
	env.Metric("rpc_net_sync_req_per_s", base.sync.perSecond(), "req/s")
	return runRPCTLS(env, addrs)
}

// runRPCTLS measures the TLS servers against the plaintext ones with
// rawClient, alternating them round by round.
func runRPCTLS(env *Env, addrs []string) error {
	plainConf, tlsConf := (*tls.Config)(nil), &tls.Config{InsecureSkipVerify: true}
	type side struct {
		name   string
		addr   string
		tls    *tls.Config
		rate   rpcRate
		rounds []float64
	}
	pairs := [][2]*side{
		{{name: "inline plain", addr: addrs[0], tls: plainConf}, {name: "inline tls", addr: addrs[3], tls: tlsConf}},
		{{name: "handler plain", addr: addrs[1], tls: plainConf}, {name: "handler tls", addr: addrs[4], tls: tlsConf}},
	}
	for round := range rpcTLSRounds {
		for _, pair := range pairs {
			for i := range pair {
				sd := pair[(round+i)%2]
				n, d, err := rawPipelined(sd.addr, sd.tls, rpcConns, rpcWindow, rpcPayload, rpcRoundLength)
				if err != nil {
					return fmt.Errorf("%s round %d: %w", sd.name, round, err)
				}
				sd.rate.add(n, d)
				sd.rounds = append(sd.rounds, float64(n)/d.Seconds())
				env.Logf("round %d %-13s %.0f req/s", round, sd.name, float64(n)/d.Seconds())
			}
		}
	}
	syncPair := [2]*side{{name: "sync plain", addr: addrs[0], tls: plainConf}, {name: "sync tls", addr: addrs[3], tls: tlsConf}}
	for round := range 2 * rpcSyncRounds {
		for i := range syncPair {
			sd := syncPair[(round+i)%2]
			n, d, err := rawSynchronous(sd.addr, sd.tls, rpcPayload, rpcSyncRoundLength)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", sd.name, round, err)
			}
			sd.rate.add(n, d)
			sd.rounds = append(sd.rounds, float64(n)/d.Seconds())
			env.Logf("round %d %-13s %.0f req/s", round, sd.name, float64(n)/d.Seconds())
		}
	}
	inline, handler := pairs[0], pairs[1]
	env.Logf("plaintext through rawClient: inline %.0f, handler %.0f, sync %.0f req/s",
		inline[0].rate.perSecond(), handler[0].rate.perSecond(), syncPair[0].rate.perSecond())
	env.Metric("rpc_tls_pipelined_req_per_s", inline[1].rate.perSecond(), "req/s")
	env.Metric("rpc_tls_vs_plain_pipelined_ratio", medianRatio(inline[1].rounds, inline[0].rounds), "x")
	env.Metric("rpc_tls_handler_pipelined_req_per_s", handler[1].rate.perSecond(), "req/s")
	env.Metric("rpc_tls_vs_plain_handler_ratio", medianRatio(handler[1].rounds, handler[0].rounds), "x")
	env.Metric("rpc_tls_sync_req_per_s", syncPair[1].rate.perSecond(), "req/s")
	env.Metric("rpc_tls_vs_plain_sync_ratio", medianRatio(syncPair[1].rounds, syncPair[0].rounds), "x")
	return nil
}

// medianRatio returns the median over rounds of a[i]/b[i]: each round
// measures both servers back to back, so a burst of load from elsewhere on
// the machine spoils one round's ratio instead of the whole figure.
func medianRatio(a, b []float64) float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = a[i] / b[i]
	}
	slices.Sort(r)
	if n := len(r); n%2 == 1 {
		return r[n/2]
	}
	return (r[len(r)/2-1] + r[len(r)/2]) / 2
}

func startPingServer(h netserver.Handler, tlsConf *tls.Config) (*netserver.Server, error) {
	srv, err := netserver.New(netserver.Options{Addr: "127.0.0.1:0", TLS: tlsConf}, h, nil)
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

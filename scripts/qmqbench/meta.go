package main

// The meta suite: route lookups against a meta server with an embedded
// etcd, the figure the issue names (at least 50,000 lookups/s over 16 client
// connections).
//
// The meta server and its etcd run in a child process (this binary
// re-executed with QMQBENCH_META_SERVER set to a data directory), the
// clients in this one. The child registers four realtime groups and routes
// 64 subjects before it prints its address, so every measured lookup is the
// steady-state kind: answered from the server's in-memory view. Lookups go
// through pkg/transport, one Client (one connection) per client connection,
// each keeping a fixed number of lookups in flight with Client.Go, over
// random subjects of the 64. The machine is shared and noisy: the suite runs
// three rounds and each figure sums them.
//
//	meta_lookups_per_s            16 connections x 8 lookups in flight
//	meta_lookups_1inflight_per_s  16 connections x 1 lookup in flight (one waiting client per connection)
//
// The failover figures of the issue (broker_failover_s, failover_failed_sends)
// need the realtime broker and are not measured here yet.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/pkg/devetcd"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
)

const (
	metaServerEnv = "QMQBENCH_META_SERVER"
	metaConns     = 16
	metaWindow    = 8
	metaSubjects  = 64
	metaRounds    = 3
	metaRound     = 2 * time.Second
)

func init() {
	register("meta", runMeta)
	if dir := os.Getenv(metaServerEnv); dir != "" {
		os.Exit(metaServerMain(dir))
	}
}

// metaServerMain runs in the child: etcd, a meta server, four registered
// groups and 64 routed subjects; it prints the TCP address and serves until
// stdin closes.
func metaServerMain(dir string) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "meta server:", err); return 1 }
	e, err := devetcd.Start(devetcd.Options{Dir: filepath.Join(dir, "etcd")}, nil)
	if err != nil {
		return fail(err)
	}
	defer e.Close()
	o := metaserver.NewOptions()
	o.Addr, o.HTTPAddr, o.EtcdEndpoints, o.AdminToken = "127.0.0.1:0", "127.0.0.1:0", e.Endpoints(), "bench"
	o.BrokerTTL = time.Minute
	s, err := metaserver.New(o, nil)
	if err != nil {
		return fail(err)
	}
	if err := s.Start(); err != nil {
		return fail(err)
	}
	defer s.Close(context.Background())
	tr, err := transport.New(transport.Options{}, nil)
	if err != nil {
		return fail(err)
	}
	defer tr.Close()
	ctx := context.Background()
	addr := s.Addr().String()
	for i := range 4 {
		req := protocol.RegisterRequest{Kind: protocol.KindRealtime, Role: protocol.RoleMaster, State: protocol.GroupReadWrite,
			Group: fmt.Sprintf("g%d", i), BrokerID: fmt.Sprintf("b%d", i), Address: fmt.Sprintf("127.0.0.1:%d", 30000+i)}
		if _, err := tr.Call(ctx, addr, protocol.CmdRegister, protocol.AppendRegisterRequest(nil, &req)); err != nil {
			return fail(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		req := protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "warmup"}
		if _, err := tr.Call(ctx, addr, protocol.CmdLookup, protocol.AppendLookupRequest(nil, &req)); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fail(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := range metaSubjects {
		req := protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: fmt.Sprintf("subject-%d", i)}
		if _, err := tr.Call(ctx, addr, protocol.CmdLookup, protocol.AppendLookupRequest(nil, &req)); err != nil {
			return fail(err)
		}
	}
	fmt.Println(addr)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

func startMetaServer(dir string) (addr string, stop func() error, err error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), metaServerEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() error { stdin.Close(); return cmd.Wait() }
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = stop()
		return "", nil, fmt.Errorf("meta server did not start: %w", err)
	}
	return strings.TrimSpace(line), stop, nil
}

func runMeta(env *Env) error {
	addr, stop, err := startMetaServer(env.Dir)
	if err != nil {
		return err
	}
	defer stop()
	var piped, single rpcRate
	for round := range metaRounds {
		env.Logf("meta round %d/%d", round+1, metaRounds)
		n, d, err := metaLookups(addr, metaConns, metaWindow, metaRound)
		if err != nil {
			return err
		}
		piped.add(n, d)
		n, d, err = metaLookups(addr, metaConns, 1, metaRound)
		if err != nil {
			return err
		}
		single.add(n, d)
	}
	env.Metric("meta_lookups_per_s", piped.perSecond(), "lookups/s")
	env.Metric("meta_lookups_1inflight_per_s", single.perSecond(), "lookups/s")
	return nil
}

// metaLookups keeps window lookups in flight on each of conns connections
// for length; every answer is decoded and checked to hold two groups.
func metaLookups(addr string, conns, window int, length time.Duration) (int64, time.Duration, error) {
	var (
		completed atomic.Int64
		stopping  atomic.Bool
		wg        sync.WaitGroup
		errOnce   sync.Once
		firstErr  error
	)
	fail := func(err error) { errOnce.Do(func() { firstErr = err; stopping.Store(true) }) }
	bodies := make([][]byte, metaSubjects)
	for i := range bodies {
		req := protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: fmt.Sprintf("subject-%d", i)}
		bodies[i] = protocol.AppendLookupRequest(nil, &req)
	}
	clients := make([]*transport.Client, conns)
	for i := range clients {
		c, err := transport.New(transport.Options{}, nil)
		if err != nil {
			return 0, 0, err
		}
		defer c.Close()
		if _, err := c.Call(context.Background(), addr, protocol.CmdLookup, bodies[0]); err != nil {
			return 0, 0, err
		}
		clients[i] = c
	}
	start := time.Now()
	for _, c := range clients {
		for range window {
			wg.Add(1)
			var next func(b []byte, err error)
			send := func() {
				if err := c.Go(addr, protocol.CmdLookup, bodies[rand.IntN(len(bodies))], 0, next); err != nil {
					fail(err)
					wg.Done()
				}
			}
			next = func(b []byte, err error) {
				if err == nil {
					var resp protocol.LookupResponse
					if resp, err = protocol.DecodeLookupResponse(b); err == nil && len(resp.Groups) != 2 {
						err = fmt.Errorf("lookup answered %d groups, want 2", len(resp.Groups))
					}
				}
				if err != nil {
					fail(err)
					wg.Done()
					return
				}
				completed.Add(1)
				if stopping.Load() {
					wg.Done()
					return
				}
				send()
			}
			send()
		}
	}
	time.Sleep(length)
	stopping.Store(true)
	wg.Wait()
	return completed.Load(), time.Since(start), firstErr
}

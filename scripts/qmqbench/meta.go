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
// Failover: a second meta server (broker lease TTL 5 s, new routes get three
// groups) and three realtime brokers, each a child process that registers
// itself (realtime.Options.MetaServers, through pkg/metaclient). Four goroutines send steadily through
// pkg/producer resolving through pkg/metaclient (route refresh every
// second). The suite SIGKILLs one broker and measures the time until the
// producers' own route shows that group unavailable — from then on no send
// goes to it — while counting the sends that returned an error to the
// application, through the failover and two seconds past it:
//
//	broker_failover_ttl_s         the lease TTL of that run
//	broker_failover_s             SIGKILL until the producers route around the group (target: TTL + 2)
//	failover_failed_sends         sends that returned an error (target: 0)
//	failover_sends                sends that succeeded in the run

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
	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/devetcd"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"
)

const (
	metaServerEnv = "QMQBENCH_META_SERVER"
	metaConns     = 16
	metaWindow    = 8
	metaSubjects  = 64
	metaRounds    = 3
	metaRound     = 2 * time.Second
)

const (
	metaTTLEnv      = "QMQBENCH_META_TTL"     // broker TTL of the child meta server
	metaFakesEnv    = "QMQBENCH_META_FAKES"   // "0": register no fake groups
	metaBrokerEnv   = "QMQBENCH_META_BROKER"  // run a realtime broker of this group
	metaBrokerDir   = "QMQBENCH_META_DIR"     // its data directory
	metaBrokerMetas = "QMQBENCH_META_ADDRESS" // the meta server it registers with
	failoverTTL     = 5 * time.Second
	failoverSubject = "bench.failover"
)

func init() {
	register("meta", runMeta)
	if dir := os.Getenv(metaServerEnv); dir != "" {
		os.Exit(metaServerMain(dir))
	}
	if group := os.Getenv(metaBrokerEnv); group != "" {
		os.Exit(metaBrokerMain(group, os.Getenv(metaBrokerDir), os.Getenv(metaBrokerMetas)))
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
	fakes := os.Getenv(metaFakesEnv) != "0"
	if ttl, err := time.ParseDuration(os.Getenv(metaTTLEnv)); err == nil {
		o.BrokerTTL = ttl
	}
	if !fakes {
		o.MinGroups = 3
	}
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
	if !fakes {
		fmt.Println(addr, s.HTTPAddr())
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	}
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

func startMetaServer(dir string, env ...string) (addr string, stop func() error, err error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), metaServerEnv+"="+dir), env...)
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
	_ = stop()
	return runFailover(env)
}

// metaBrokerMain runs in a child: a realtime broker of group that
// registers itself with the meta server at meta (realtime.Options
// .MetaServers); it prints its address and serves until killed (or its
// stdin closes).
func metaBrokerMain(group, dir, meta string) int {
	o := realtime.NewOptions()
	o.Group, o.Addr, o.HTTPAddr, o.DataDir, o.MetaServers = group, "127.0.0.1:0", "", dir, []string{meta}
	o.SegmentSize = 64 << 20
	b, err := realtime.New(o, nil)
	if err == nil {
		err = b.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "broker "+group+":", err)
		return 1
	}
	fmt.Println(b.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = b.Close(context.Background())
	return 0
}

func runFailover(env *Env) error {
	addrs, stopMeta, err := startMetaServer(filepath.Join(env.Dir, "failover-meta"), metaFakesEnv+"=0", metaTTLEnv+"="+failoverTTL.String())
	if err != nil {
		return err
	}
	defer stopMeta()
	meta, metaHTTP, _ := strings.Cut(addrs, " ")
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var brokers []*exec.Cmd
	defer func() {
		for _, b := range brokers {
			_ = b.Process.Kill()
			_ = b.Wait()
		}
	}()
	for _, g := range []string{"rt1", "rt2", "rt3"} {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), metaBrokerEnv+"="+g, metaBrokerDir+"="+filepath.Join(env.Dir, g), metaBrokerMetas+"="+meta)
		cmd.Stderr = os.Stderr
		if _, err := cmd.StdinPipe(); err != nil {
			return err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		brokers = append(brokers, cmd)
		if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
			return fmt.Errorf("broker %s did not start: %w", g, err)
		}
	}
	ctx := context.Background()
	mc, err := metaclient.New([]string{meta}, "bench-producer", metaclient.WithRefreshInterval(time.Second))
	if err != nil {
		return err
	}
	defer mc.Close()
	// The brokers register in the background: wait until all three are
	// registered before the subject's first lookup assigns its route.
	admin := api.NewClient(metaHTTP, "", 5*time.Second)
	for deadline := time.Now().Add(15 * time.Second); ; {
		gs, err := admin.Groups(ctx)
		if err == nil && len(gs) == 3 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the three brokers never registered: %+v, %v", gs, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r, err := mc.Lookup(ctx, protocol.ClientProducer, failoverSubject, ""); err != nil || len(r.Writable()) != 3 {
		return fmt.Errorf("route of %s: %+v, %v: want three writable groups", failoverSubject, r, err)
	}
	p, err := producer.New(producer.WithResolver(mc))
	if err != nil {
		return err
	}
	defer p.Close(ctx)
	var sent, failed atomic.Int64
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stopLoad:
					return
				default:
				}
				err := p.Send(ctx, &producer.Message{Subject: failoverSubject, ID: fmt.Sprintf("f-%d-%d", w, i), Body: []byte("failover")})
				if err != nil {
					failed.Add(1)
					env.Logf("send failed: %v", err)
					continue
				}
				sent.Add(1)
			}
		}()
	}
	time.Sleep(3 * time.Second) // steady load on all three groups
	victim := brokers[0]
	killed := time.Now()
	if err := victim.Process.Kill(); err != nil { // SIGKILL
		return err
	}
	_ = victim.Wait()
	brokers = brokers[1:]
	var failover time.Duration
	for {
		r, err := mc.Lookup(ctx, protocol.ClientProducer, failoverSubject, "")
		if err == nil && len(r.Writable()) == 2 {
			failover = time.Since(killed)
			break
		}
		if time.Since(killed) > failoverTTL+30*time.Second {
			close(stopLoad)
			wg.Wait()
			return fmt.Errorf("producers still route to the killed group %v after the kill", time.Since(killed))
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := sent.Load()
	time.Sleep(2 * time.Second)
	after := sent.Load()
	close(stopLoad)
	wg.Wait()
	if after == before {
		return fmt.Errorf("no send succeeded in the 2 s after the failover")
	}
	env.Metric("broker_failover_ttl_s", failoverTTL.Seconds(), "s")
	env.Metric("broker_failover_s", failover.Seconds(), "s")
	env.Metric("failover_failed_sends", float64(failed.Load()), "sends")
	env.Metric("failover_sends", float64(sent.Load()), "sends")
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

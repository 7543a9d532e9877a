package main

// The netlimits suite: the memory a pkg/netserver server holds for frames
// that have not fully arrived, with MaxPartialBytes at 64 MiB. The server
// runs in a child process (as in the rpc suite); this process opens the
// connections and reads the child's resident set from /proc.
//
//	partial_frame_memory_mb              growth of the server's peak RSS (VmHWM) over its RSS before,
//	                                     while 1,000 connections each send the header of a 16 MiB frame
//	                                     and then 1 MiB of its body (the bound: the cap plus 64)
//	partial_frame_memory_after_close_mb  the server's RSS over its RSS before, once they have closed
//	partial_frame_held_conns             connections whose partial frame the server held (the others
//	                                     were answered StatusBusy and closed)

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

const (
	netLimitsEnv       = "QMQBENCH_NETLIMITS_SERVER"
	netLimitsConns     = 1000
	netLimitsFrame     = 16 << 20
	netLimitsSent      = 1 << 20
	netLimitsMaxHeld   = 64 << 20 // MaxPartialBytes
	netLimitsSettleFor = time.Second
)

func init() {
	register("netlimits", runNetLimits)
	if os.Getenv(netLimitsEnv) == "1" {
		os.Exit(netLimitsServerMain())
	}
}

// netLimitsServerMain runs in the child: a server with MaxPartialBytes at
// 64 MiB, serving until stdin closes.
func netLimitsServerMain() int {
	srv, err := netserver.New(netserver.Options{Addr: "127.0.0.1:0", MaxPartialBytes: netLimitsMaxHeld}, netserver.NewMux(), nil)
	if err == nil {
		err = srv.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "netlimits server:", err)
		return 1
	}
	fmt.Println(srv.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Close(ctx)
	return 0
}

func runNetLimits(env *Env) error {
	addrs, proc, stop, err := startChild(netLimitsEnv, 1)
	if err != nil {
		return err
	}
	defer stop()
	addr := addrs[0]
	if n, _, err := rawSynchronous(addr, nil, 64, 100*time.Millisecond); err != nil || n == 0 {
		return fmt.Errorf("warm-up pings: %d, %v", n, err)
	}
	before, err := procStatusKB(proc.Pid, "VmRSS")
	if err != nil {
		return err
	}

	conns := make([]net.Conn, netLimitsConns)
	for i := range conns {
		if conns[i], err = net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		defer conns[i].Close()
	}
	frame := protocol.AppendHeader(nil, protocol.Header{Version: protocol.Version, Code: uint16(protocol.CmdPing),
		BodyLen: netLimitsFrame})
	frame = append(frame, make([]byte, netLimitsSent)...)
	var wg sync.WaitGroup
	for _, nc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			_, _ = nc.Write(frame) // a refused connection's write fails
		}()
	}
	wg.Wait()
	time.Sleep(netLimitsSettleFor)

	// A held connection has no answer; a refused one has StatusBusy, then EOF.
	held := 0
	hdr := make([]byte, protocol.HeaderSize)
	for _, nc := range conns {
		_ = nc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err := io.ReadFull(nc, hdr)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			held++
		}
	}
	peak, err := procStatusKB(proc.Pid, "VmHWM")
	if err != nil {
		return err
	}
	for _, nc := range conns {
		nc.Close()
	}
	time.Sleep(2 * netLimitsSettleFor) // refused connections linger a second
	after, err := procStatusKB(proc.Pid, "VmRSS")
	if err != nil {
		return err
	}
	env.Logf("server RSS %d MiB before, peak %d MiB, %d MiB after the connections closed; %d of %d held",
		before>>10, peak>>10, after>>10, held, netLimitsConns)
	env.Metric("partial_frame_memory_mb", float64(peak-before)/1024, "MiB")
	env.Metric("partial_frame_memory_after_close_mb", float64(after-before)/1024, "MiB")
	env.Metric("partial_frame_held_conns", float64(held), "conns")
	return nil
}

// procStatusKB reads a kB field (VmRSS, VmHWM) of /proc/<pid>/status.
func procStatusKB(pid int, field string) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

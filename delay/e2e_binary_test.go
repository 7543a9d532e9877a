package delay_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// The qmq-delay binary end to end: built from delay/cmd/qmq-delay, run with
// its flags against an in-process realtime broker, stopped with SIGTERM
// while messages are pending (a clean exit, status 0), restarted on the same
// data directory: every message arrives once, never early, and the pending
// gauge on /metrics drops to 0.
func TestE2E_BinaryStopRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the qmq-delay binary")
	}
	bin := filepath.Join(t.TempDir(), "qmq-delay")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "github.com/qmq-go/qmq/delay/cmd/qmq-delay")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	ro := realtime.NewOptions()
	ro.Addr, ro.HTTPAddr, ro.DataDir, ro.SegmentSize = "127.0.0.1:0", "", t.TempDir(), 8<<20
	rt, err := realtime.New(ro, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	rtAddr := rt.Addr().String()
	dir, addr, httpAddr := t.TempDir(), testutil.ReusableAddr(t), testutil.ReusableAddr(t)
	run := func() (*exec.Cmd, *strings.Builder) {
		cmd := exec.Command(bin, "--addr", addr, "--http-addr", httpAddr, "--data-dir", dir, "--realtime", rtAddr, "--log-level", "warn")
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		testutil.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
			resp, err := http.Get("http://" + httpAddr + "/readyz")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("/readyz: %s", resp.Status)
			}
			return nil
		})
		return cmd, out
	}
	cmd, out := run()

	res := route.NewStatic(route.Groups(rtAddr), route.Groups(addr))
	p, err := producer.New(producer.WithResolver(res), producer.WithTransportOptions(fastTransport))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	start := time.Now()
	var ids []string
	for i := range 200 {
		m := &producer.Message{Subject: "e2e", Body: fmt.Appendf(nil, "%d", i),
			DeliverAt: start.Add(2*time.Second + time.Duration(i)*10*time.Millisecond)}
		if err := p.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	if n := pendingGauge(t, httpAddr); n != 200 {
		t.Fatalf("pending gauge %v after 200 sends", n)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("qmq-delay after SIGTERM: %v: %s", err, out)
	}
	run()

	var (
		mu    sync.Mutex
		got   = map[string]int{}
		early int
	)
	c, err := consumer.New(consumer.WithBrokers(rtAddr), consumer.WithConsumerID("e2e"), consumer.WithTransportOptions(fastTransport))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Subscribe("e2e", "g", func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if time.Now().Before(m.DeliverAt) {
			early++
		}
		got[m.ID]++
		return nil
	}, consumer.StartEarliest()); err != nil {
		t.Fatal(err)
	}
	testutil.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) < len(ids) {
			return fmt.Errorf("%d of %d delivered", len(got), len(ids))
		}
		return nil
	})
	testutil.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if n := pendingGauge(t, httpAddr); n != 0 {
			return fmt.Errorf("pending gauge %v", n)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("message %s delivered %d times", id, got[id])
		}
	}
	if early > 0 {
		t.Errorf("%d deliveries before their due time", early)
	}
}

// pendingGauge reads qmq_delay_messages_pending from /metrics.
func pendingGauge(t *testing.T, httpAddr string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "qmq_delay_messages_pending{"); ok {
			var v float64
			if _, err := fmt.Sscan(rest[strings.LastIndexByte(rest, ' ')+1:], &v); err == nil {
				return v
			}
		}
	}
	t.Fatalf("no qmq_delay_messages_pending in /metrics")
	return 0
}

// The qmq-delay binary as a group of two: a master with --wait-slave and a
// slave with --role slave --master: every acknowledged message is on the
// slave (its pending gauge), and both stop cleanly on SIGTERM.
func TestE2E_BinaryMasterAndSlave(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the qmq-delay binary")
	}
	bin := filepath.Join(t.TempDir(), "qmq-delay")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "github.com/qmq-go/qmq/delay/cmd/qmq-delay")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	start := func(args ...string) (*exec.Cmd, *strings.Builder, string) {
		addr, httpAddr := testutil.ReusableAddr(t), testutil.ReusableAddr(t)
		cmd := exec.Command(bin, append([]string{"--addr", addr, "--http-addr", httpAddr, "--data-dir", t.TempDir(),
			"--realtime", rtAddr, "--log-level", "warn"}, args...)...)
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		testutil.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
			_, err := gaugeAt(httpAddr, "qmq_delay_role")
			return err
		})
		return cmd, out, httpAddr
	}
	master, mout, _ := start("--wait-slave")
	masterAddr := master.Args[2]
	slave, sout, slaveHTTP := start("--role", "slave", "--master", masterAddr)
	if v, _ := gaugeAt(slaveHTTP, "qmq_delay_role"); v != 2 {
		t.Fatalf("slave's role gauge %v", v)
	}
	p, err := producer.New(producer.WithResolver(route.NewStatic(route.Groups(rtAddr), route.Groups(masterAddr))),
		producer.WithTransportOptions(fastTransport))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	for i := range 50 {
		m := &producer.Message{Subject: "e2e-slave", Body: fmt.Appendf(nil, "%d", i), DeliverAt: time.Now().Add(time.Hour)}
		if err := p.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		if v, err := gaugeAt(slaveHTTP, "qmq_delay_messages_pending"); err != nil || v != float64(i+1) {
			t.Fatalf("send %d acknowledged; the slave holds %v (%v)", i, v, err)
		}
	}
	for _, c := range []struct {
		cmd *exec.Cmd
		out *strings.Builder
	}{{slave, sout}, {master, mout}} {
		c.cmd.Process.Signal(syscall.SIGTERM)
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("%s after SIGTERM: %v: %s", c.cmd.Args, err, c.out)
		}
	}
}

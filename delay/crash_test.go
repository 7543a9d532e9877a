package delay_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// The crash test: a delay server in a child process (this test binary
// re-executed, running TestDelayCrashChild) is SIGKILLed at random moments
// while a producer keeps sending delayed messages to it and it forwards the
// due ones to an in-process realtime broker, and restarted on the same data
// directory each time. Every message whose send was acknowledged must reach
// the consumer group, never before its due time. A message forwarded but not
// yet recorded in the dispatch log when the server died is forwarded again
// after the restart (the documented crash window); the realtime broker drops
// that copy within its dedupe window, so the consumer must see no duplicate.
//
// Short: 3 kills. QMQ_DELAY_CRASH_LONG=1: 10 kills and a heavier load.

const crashChildRole = "delay-crash-child"

// TestDelayCrashChild is the child: it serves a delay server until killed.
func TestDelayCrashChild(t *testing.T) {
	if testutil.ChildRole() != crashChildRole {
		t.Skip("runs only as the crash test's child process")
	}
	o := delay.NewOptions()
	o.Addr, o.HTTPAddr, o.DataDir = os.Getenv("QMQ_DELAY_CRASH_ADDR"), "", os.Getenv("QMQ_DELAY_CRASH_DIR")
	o.Realtime = []string{os.Getenv("QMQ_DELAY_CRASH_REALTIME")}
	s, err := delay.New(o, nil, nil, zap.NewNop())
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open:", err)
		os.Exit(3)
	}
	if err := s.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "child: start:", err)
		os.Exit(3)
	}
	fmt.Println("ready")
	select {} // until SIGKILL
}

// crashChild is a running child delay server.
type crashChild struct {
	cmd    *exec.Cmd
	stderr *strings.Builder
	done   chan struct{}
}

func startCrashChild(t *testing.T, dir, addr, realtimeAddr string) *crashChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDelayCrashChild$", "-test.v")
	cmd.Env = append(os.Environ(), testutil.ChildEnv+"="+crashChildRole, "QMQ_DELAY_CRASH_DIR="+dir,
		"QMQ_DELAY_CRASH_ADDR="+addr, "QMQ_DELAY_CRASH_REALTIME="+realtimeAddr)
	stderr := &strings.Builder{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &crashChild{cmd: cmd, stderr: stderr, done: make(chan struct{})}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if !ok && sc.Text() == "ready" {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
		cmd.Wait()
		close(c.done)
	}()
	select {
	case ok := <-ready:
		if !ok {
			<-c.done
			t.Fatalf("delay child exited before ready: %s", stderr.String())
		}
	case <-time.After(30 * time.Second):
		c.kill()
		t.Fatalf("delay child not ready after 30s: %s", stderr.String())
	}
	t.Cleanup(c.kill)
	return c
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *crashChild) kill() {
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

func TestDelay_CrashLosesNothing(t *testing.T) {
	kills, rate, spread := 3, 1000, 3*time.Second
	if os.Getenv("QMQ_DELAY_CRASH_LONG") == "1" {
		kills, rate, spread = 10, 5000, 8*time.Second
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

	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dlAddr := l.Addr().String()
	l.Close()
	child := startCrashChild(t, dir, dlAddr, rtAddr)

	var (
		mu       sync.Mutex
		got      = map[string]int{}
		early    atomic.Int64
		acked    sync.Map // id → struct{}
		ackCount atomic.Int64
		failed   atomic.Int64
	)
	c, err := consumer.New(consumer.WithBrokers(rtAddr), consumer.WithConsumerID("crash"), consumer.WithTransportOptions(fastTransport))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Subscribe("crash", "g", func(ctx context.Context, m *consumer.Message) error {
		if time.Now().Before(m.DeliverAt) {
			early.Add(1)
		}
		mu.Lock()
		got[m.ID]++
		mu.Unlock()
		return nil
	}, consumer.StartEarliest(), consumer.Concurrency(4)); err != nil {
		t.Fatal(err)
	}

	res := route.NewStatic(route.Groups(rtAddr), route.Groups(dlAddr))
	p, err := producer.New(producer.WithResolver(res), producer.WithTransportOptions(fastTransport),
		producer.WithSendTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	stopSending := make(chan struct{})
	sent := make(chan struct{})
	go func() { // sendLoop: rate messages a second, each due 1 s..1 s+spread ahead
		defer close(sent)
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; {
			select {
			case <-stopSending:
				return
			case <-tick.C:
			}
			for range rate / 100 {
				m := &producer.Message{Subject: "crash", Body: fmt.Appendf(nil, "m%d", i),
					DeliverAt: time.Now().Add(time.Second + time.Duration(rng.Int64N(int64(spread))))}
				i++
				if err := p.SendAsync(m, func(m *producer.Message, err error) {
					if err != nil {
						failed.Add(1)
						return
					}
					acked.Store(m.ID, struct{}{})
					ackCount.Add(1)
				}); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	for k := range kills {
		// Messages fall due from 1 s after the first send: every kill lands
		// while some are pending, some being forwarded, some being sent.
		time.Sleep(1100*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second))))
		mu.Lock()
		delivered := len(got)
		mu.Unlock()
		t.Logf("kill %d: %d acked, %d delivered so far", k+1, ackCount.Load(), delivered)
		child.kill()
		child = startCrashChild(t, dir, dlAddr, rtAddr)
	}
	time.Sleep(500 * time.Millisecond)
	close(stopSending)
	<-sent
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var ids []string
	acked.Range(func(k, _ any) bool { ids = append(ids, k.(string)); return true })
	if len(ids) == 0 {
		t.Fatal("no send acknowledged")
	}
	t.Logf("%d sends acknowledged, %d failed (not acknowledged: the producer was told)", len(ids), failed.Load())
	testutil.CheckFor(t, 30*time.Second+spread, 50*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		missing := 0
		for _, id := range ids {
			if got[id] == 0 {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d acknowledged messages not delivered", missing, len(ids))
		}
		return nil
	})
	time.Sleep(time.Second) // late duplicates, if any, arrive
	mu.Lock()
	defer mu.Unlock()
	dups := 0
	for _, n := range got {
		dups += n - 1
	}
	t.Logf("%d kills: %d acknowledged, all delivered; %d delivered in all (unacknowledged sends may arrive too), %d duplicates",
		kills, len(ids), len(got), dups)
	if n := early.Load(); n > 0 {
		t.Errorf("%d deliveries before their due time", n)
	}
	// Re-forwards after a crash are dropped by the realtime broker's dedupe
	// window, so the consumer group sees each message once.
	if dups > 0 {
		t.Errorf("%d duplicate deliveries", dups)
	}
}

package realtime_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/testutil"
)

func TestMain(m *testing.M) {
	if testutil.ChildRole() == "slow-consumer" {
		runSlowConsumer()
		return
	}
	os.Exit(m.Run())
}

// runSlowConsumer is the child of TestBroker_ConsumerCrashLosesNothing: it
// consumes with a slow handler, printing each message it finished, so it
// always holds un-acked messages when it is killed.
func runSlowConsumer() {
	addr := os.Getenv("QMQ_TEST_BROKER")
	c, err := consumer.New(consumer.WithBrokers(addr), consumer.WithConsumerID("doomed"))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	_, err = c.Subscribe("crash", "g", func(ctx context.Context, m *consumer.Message) error {
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		fmt.Println("handled", m.ID)
		mu.Unlock()
		return nil
	}, consumer.StartEarliest(), consumer.Concurrency(4), consumer.PullBatch(50), consumer.MaxUnacked(200))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	select {}
}

// A consumer process holding un-acked messages is SIGKILLed: after the
// consumer timeout the rest of its group gets them, and every message is
// handled.
func TestBroker_ConsumerCrashLosesNothing(t *testing.T) {
	b := startBroker(t, t.TempDir())
	p := newProducer(t, b.addr())
	ids := sendN(t, p, "crash", 2000, nil)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), testutil.ChildEnv+"=slow-consumer", "QMQ_TEST_BROKER="+b.addr())
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	childHandled := map[string]bool{}
	started := make(chan struct{})
	scanDone := make(chan struct{})
	go func() {
		defer close(scanDone)
		sc := bufio.NewScanner(out)
		n := 0
		for sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), "handled "); ok {
				mu.Lock()
				childHandled[id] = true
				mu.Unlock()
				if n++; n == 50 {
					close(started)
				}
			}
		}
	}()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		child.Process.Kill()
		t.Fatal("child consumer handled nothing")
	}
	child.Process.Kill()
	child.Wait()
	<-scanDone

	col := newCollector()
	c := newConsumer(t, "survivor", b.addr())
	if _, err := c.Subscribe("crash", "g", col.handler, consumer.StartEarliest(), consumer.Concurrency(4)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	var rest []string
	for _, id := range ids {
		if !childHandled[id] {
			rest = append(rest, id)
		}
	}
	handledByChild := len(childHandled)
	mu.Unlock()
	if handledByChild >= len(ids) {
		t.Fatal("the child handled everything before it was killed")
	}
	col.waitAll(t, rest, 30*time.Second)
	t.Logf("child handled %d before SIGKILL; survivor handled %d (duplicates %d)", handledByChild, col.total.Load(), col.duplicates())
}

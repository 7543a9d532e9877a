package outbox

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/producer"
)

// Child processes: the test binary re-executed with testutil.ChildEnv set.
const (
	childApp = "outbox-app" // an application instance to SIGKILL (childAppMain)

	childSent = 3 // transactions the child commits and hands over normally
	childHung = 5 // transactions whose commits then hang before the hand-over
)

// runChild runs the role this test binary was started for and returns the
// exit code.
func runChild(role string) int {
	switch role {
	case childApp:
		if err := childAppMain(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 1
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown child role", role)
	return 2
}

// childAppMain commits childSent orders whose messages go out, then
// childHung orders at once whose commits stop right after the database
// commit, before the hand-over, printing "committed <id>"; then it waits to
// be killed. It uses no watchdog of its own.
func childAppMain() error {
	env := func(k string) string { return os.Getenv("QMQ_OUTBOX_" + k) }
	e := &dbEnv{dialect: Dialect(env("DIALECT")), table: env("TABLE"), business: env("BUSINESS")}
	db, err := sql.Open(env("DRIVER"), env("DSN"))
	if err != nil {
		return err
	}
	p, err := producer.New(producer.WithBrokers(env("BROKER")))
	if err != nil {
		return err
	}
	delay, err := time.ParseDuration(env("DELAY"))
	if err != nil {
		return err
	}
	var (
		hang atomic.Bool
		out  sync.Mutex
	)
	o, err := New(db, e.dialect, p, WithTable(e.table), WithDelay(delay), WithoutWatchdog(),
		withAfterCommit(func(ids []string) {
			if !hang.Load() {
				return
			}
			out.Lock()
			for _, id := range ids {
				fmt.Printf("committed %s\n", id)
			}
			out.Unlock()
			select {} // the process is killed here, between commit and send
		}))
	if err != nil {
		return err
	}
	ctx := context.Background()
	commit := func(name string) (string, error) {
		var id string
		err := o.Transact(ctx, nil, func(tx *Tx) error {
			msg, err := order(ctx, e, tx, name, "order.paid")
			if msg != nil {
				id = msg.ID
			}
			return err
		})
		return id, err
	}
	for i := range childSent {
		id, err := commit(fmt.Sprintf("k-sent-%d", i))
		if err != nil {
			return err
		}
		out.Lock()
		fmt.Printf("sent %s\n", id)
		out.Unlock()
	}
	hang.Store(true)
	for i := range childHung {
		go func() {
			if _, err := commit(fmt.Sprintf("k-hung-%d", i)); err != nil {
				fmt.Fprintln(os.Stderr, "child commit:", err)
				os.Exit(1)
			}
		}()
	}
	select {}
}

// An application instance is SIGKILLed after its transactions committed and
// before it handed their messages over: another instance's watchdog sends
// them, each once.
func TestKilledBetweenCommitAndSend(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		b := startBroker(t, t.TempDir(), "127.0.0.1:0")
		addr := b.Addr().String()
		col := collect(t, addr, "order.paid")
		const delay = 300 * time.Millisecond

		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), testutil.ChildEnv+"="+childApp,
			"QMQ_OUTBOX_DIALECT="+string(e.dialect), "QMQ_OUTBOX_DRIVER="+e.driver, "QMQ_OUTBOX_DSN="+e.dsn,
			"QMQ_OUTBOX_TABLE="+e.table, "QMQ_OUTBOX_BUSINESS="+e.business, "QMQ_OUTBOX_BROKER="+addr,
			"QMQ_OUTBOX_DELAY="+delay.String())
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 100)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		var sent, hung []string
		timeout := time.After(60 * time.Second)
		for len(sent) < childSent || len(hung) < childHung {
			select {
			case l, ok := <-lines:
				if !ok {
					cmd.Wait()
					t.Fatalf("child ended early: %s", stderr.String())
				}
				if id, ok := strings.CutPrefix(l, "sent "); ok {
					sent = append(sent, id)
				} else if id, ok := strings.CutPrefix(l, "committed "); ok {
					hung = append(hung, id)
				}
			case <-timeout:
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("child committed %d+%d of %d+%d: %s", len(sent), len(hung), childSent, childHung, stderr.String())
			}
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		killed := time.Now()

		for _, id := range hung {
			if n := e.count(t, e.table, "id = ?", id); n != 1 {
				t.Fatalf("row of committed message %s: %d", id, n)
			}
			if n := col.deliveries(id); n != 0 {
				t.Fatalf("message %s delivered before the watchdog ran", id)
			}
		}
		o := newOutbox(t, e, nil, newProducer(t, addr, ""), WithDelay(delay), WithScanInterval(50*time.Millisecond))
		col.waitAll(t, 30*time.Second, append(append([]string(nil), sent...), hung...)...)
		var worst time.Duration
		for _, id := range hung {
			r, _ := col.first(id)
			worst = max(worst, r.at.Sub(killed))
		}
		t.Logf("the watchdog delivered the killed instance's messages within %v of the kill (delay %v)", worst, delay)
		if worst > delay+10*time.Second {
			t.Fatalf("watchdog took %v", worst)
		}
		waitFor(t, 10*time.Second, "outbox table empty", func() bool { return e.count(t, e.table, "") == 0 })
		marker(t, e, o, col, "order.paid")
		for _, id := range append(sent, hung...) {
			if n := col.deliveries(id); n != 1 {
				t.Fatalf("message %s delivered %d times", id, n)
			}
		}
	})
}

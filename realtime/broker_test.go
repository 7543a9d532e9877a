package realtime_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/pkg/transport"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"
	"go.uber.org/zap/zaptest"
)

type testBroker struct {
	*realtime.Broker
	opts realtime.Options
}

func startBroker(t *testing.T, dir string, mutate ...func(*realtime.Options)) *testBroker {
	t.Helper()
	o := realtime.NewOptions()
	o.Addr = "127.0.0.1:0"
	o.HTTPAddr = ""
	o.DataDir = dir
	o.SegmentSize = 8 << 20
	o.ConsumerTimeout = 2 * time.Second
	o.RetryDelay = 200 * time.Millisecond
	for _, m := range mutate {
		m(&o)
	}
	b, err := realtime.New(o, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	return &testBroker{Broker: b, opts: o}
}

func (b *testBroker) addr() string { return b.Addr().String() }

var fastTransport = transport.Options{RedialBackoffMin: 10 * time.Millisecond, RedialBackoffMax: 100 * time.Millisecond, RequestTimeout: 3 * time.Second}

func newProducer(t *testing.T, addrs ...string) *producer.Producer {
	t.Helper()
	p, err := producer.New(producer.WithBrokers(addrs...), producer.WithLogger(zaptest.NewLogger(t)),
		producer.WithTransportOptions(fastTransport), producer.WithSendTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

func newConsumer(t *testing.T, id string, addrs ...string) *consumer.Consumer {
	t.Helper()
	c, err := consumer.New(consumer.WithBrokers(addrs...), consumer.WithConsumerID(id), consumer.WithLogger(zaptest.NewLogger(t)),
		consumer.WithTransportOptions(fastTransport), consumer.WithRouteRefresh(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

func sendN(t *testing.T, p *producer.Producer, subject string, n int, mutate func(i int, m *producer.Message)) []string {
	t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	var failed atomic.Int32
	wg.Add(n)
	for i := range n {
		m := &producer.Message{Subject: subject, Body: []byte(fmt.Sprintf("body-%d", i))}
		if mutate != nil {
			mutate(i, m)
		}
		if err := p.SendAsync(m, func(_ *producer.Message, err error) {
			if err != nil {
				t.Errorf("send: %v", err)
				failed.Add(1)
			}
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
		ids[i] = m.ID
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d sends failed", failed.Load())
	}
	return ids
}

// collector counts deliveries per message id.
type collector struct {
	mu    sync.Mutex
	count map[string]int
	total atomic.Int64
}

func newCollector() *collector { return &collector{count: map[string]int{}} }

func (c *collector) handler(ctx context.Context, m *consumer.Message) error {
	c.mu.Lock()
	c.count[m.ID]++
	c.mu.Unlock()
	c.total.Add(1)
	return nil
}

func (c *collector) waitAll(t *testing.T, ids []string, timeout time.Duration) {
	t.Helper()
	testutil.CheckFor(t, timeout, 10*time.Millisecond, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		missing := 0
		for _, id := range ids {
			if c.count[id] == 0 {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d messages not received", missing, len(ids))
		}
		return nil
	})
}

func (c *collector) duplicates() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := 0
	for _, n := range c.count {
		d += n - 1
	}
	return d
}

func TestBroker_RoundTrip(t *testing.T) {
	b := startBroker(t, t.TempDir())
	p := newProducer(t, b.addr())
	col := newCollector()
	c := newConsumer(t, "c1", b.addr())
	if _, err := c.Subscribe("orders", "billing", col.handler, consumer.StartEarliest(), consumer.Concurrency(4)); err != nil {
		t.Fatal(err)
	}
	ids := sendN(t, p, "orders", 2000, nil)
	col.waitAll(t, ids, 20*time.Second)
	if d := col.duplicates(); d != 0 {
		t.Fatalf("%d duplicate deliveries without failures", d)
	}
}

func TestBroker_EveryGroupGetsEveryMessage(t *testing.T) {
	b := startBroker(t, t.TempDir())
	p := newProducer(t, b.addr())
	c := newConsumer(t, "c1", b.addr())
	cols := []*collector{newCollector(), newCollector(), newCollector()}
	for i, col := range cols {
		if _, err := c.Subscribe("orders", fmt.Sprintf("g%d", i), col.handler, consumer.StartEarliest()); err != nil {
			t.Fatal(err)
		}
	}
	ids := sendN(t, p, "orders", 500, nil)
	for _, col := range cols {
		col.waitAll(t, ids, 20*time.Second)
	}
}

func TestBroker_NewGroupStartsAtLatest(t *testing.T) {
	b := startBroker(t, t.TempDir())
	p := newProducer(t, b.addr())
	sendN(t, p, "orders", 100, nil) // before the group exists
	col := newCollector()
	c := newConsumer(t, "c1", b.addr())
	if _, err := c.Subscribe("orders", "late", col.handler); err != nil {
		t.Fatal(err)
	}
	// Let the group's first pull create it at the latest position.
	time.Sleep(300 * time.Millisecond)
	ids := sendN(t, p, "orders", 50, nil)
	col.waitAll(t, ids, 20*time.Second)
	if got := col.total.Load(); got != 50 {
		t.Fatalf("group starting at latest received %d messages, want 50", got)
	}
}

func TestBroker_DuplicateSendsStoredOnce(t *testing.T) {
	b := startBroker(t, t.TempDir())
	tc, err := transport.New(fastTransport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	raw, _ := protocol.AppendMessage(nil, &protocol.Message{Subject: "s", ID: "fixed-id", Body: []byte("x")}, protocol.DefaultLimits)
	for i := range 3 {
		resp, err := tc.Call(context.Background(), b.addr(), protocol.CmdSend, protocol.AppendSendRequest(nil, 0, [][]byte{raw, raw}))
		if err != nil {
			t.Fatal(err)
		}
		st, err := protocol.DecodeSendResponse(resp)
		if err != nil {
			t.Fatal(err)
		}
		want := []protocol.Status{protocol.StatusOK, protocol.StatusDuplicate}
		if i > 0 {
			want[0] = protocol.StatusDuplicate
		}
		if st[0] != want[0] || st[1] != want[1] {
			t.Fatalf("round %d: statuses %v, want %v", i, st, want)
		}
	}
}

// TestBroker_BatchWithDuplicatesAndRejects: one send request mixing new
// messages, a message over the size limit and duplicates (of an earlier
// request and within the request) stores exactly the new ones, each with
// its own body, under both flush modes (async appends the parsed messages
// at once, sync hands the raw ones to the store).
func TestBroker_BatchWithDuplicatesAndRejects(t *testing.T) {
	for _, flush := range []string{"async", "sync"} {
		t.Run(flush, func(t *testing.T) {
			b := startBroker(t, t.TempDir(), func(o *realtime.Options) { o.Flush, o.MaxBody = flush, 64 })
			tc, err := transport.New(fastTransport, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tc.Close()
			msg := func(id string, body []byte) []byte {
				raw, err := protocol.AppendMessage(nil, &protocol.Message{Subject: "mixed", ID: id, Body: body}, protocol.DefaultLimits)
				if err != nil {
					t.Fatal(err)
				}
				return raw
			}
			send := func(want []protocol.Status, raws ...[]byte) {
				t.Helper()
				resp, err := tc.Call(context.Background(), b.addr(), protocol.CmdSend, protocol.AppendSendRequest(nil, 0, raws))
				if err != nil {
					t.Fatal(err)
				}
				st, err := protocol.DecodeSendResponse(resp)
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(st) != fmt.Sprint(want) {
					t.Fatalf("statuses %v, want %v", st, want)
				}
			}
			ok, dup := protocol.StatusOK, protocol.StatusDuplicate
			send([]protocol.Status{ok}, msg("a", []byte("body-a")))
			send([]protocol.Status{ok, dup, protocol.StatusTooLarge, ok, dup, ok},
				msg("b", []byte("body-b")), msg("a", []byte("body-a")), msg("big", make([]byte, 100)),
				msg("c", []byte("body-c")), msg("b", []byte("body-b")), msg("d", []byte("body-d")))

			var mu sync.Mutex
			got := map[string][]string{}
			c := newConsumer(t, "c", b.addr())
			if _, err := c.Subscribe("mixed", "g", func(ctx context.Context, m *consumer.Message) error {
				mu.Lock()
				got[m.ID] = append(got[m.ID], string(m.Body))
				mu.Unlock()
				return nil
			}, consumer.StartEarliest()); err != nil {
				t.Fatal(err)
			}
			testutil.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
				mu.Lock()
				defer mu.Unlock()
				if len(got) < 4 {
					return fmt.Errorf("%d of 4 messages", len(got))
				}
				return nil
			})
			time.Sleep(100 * time.Millisecond) // a stored duplicate would show up as a second copy
			mu.Lock()
			defer mu.Unlock()
			want := map[string][]string{"a": {"body-a"}, "b": {"body-b"}, "c": {"body-c"}, "d": {"body-d"}}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("stored %v, want %v", got, want)
			}
		})
	}
}

func TestBroker_Tags(t *testing.T) {
	b := startBroker(t, t.TempDir())
	p := newProducer(t, b.addr())
	c := newConsumer(t, "c1", b.addr())
	anyCol, allCol := newCollector(), newCollector()
	if _, err := c.Subscribe("events", "any", anyCol.handler, consumer.StartEarliest(), consumer.TagsAny("red", "blue")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe("events", "all", allCol.handler, consumer.StartEarliest(), consumer.TagsAll("red", "big")); err != nil {
		t.Fatal(err)
	}
	tagsOf := [][]string{{"red"}, {"blue"}, {"red", "big"}, {"green"}, nil, {"big"}}
	ids := sendN(t, p, "events", 600, func(i int, m *producer.Message) { m.Tags = tagsOf[i%len(tagsOf)] })
	var wantAny, wantAll []string
	for i, id := range ids {
		tags := tagsOf[i%len(tagsOf)]
		has := map[string]bool{}
		for _, tg := range tags {
			has[tg] = true
		}
		if has["red"] || has["blue"] {
			wantAny = append(wantAny, id)
		}
		if has["red"] && has["big"] {
			wantAll = append(wantAll, id)
		}
	}
	anyCol.waitAll(t, wantAny, 20*time.Second)
	allCol.waitAll(t, wantAll, 20*time.Second)
	time.Sleep(200 * time.Millisecond)
	if anyCol.total.Load() != int64(len(wantAny)) || allCol.total.Load() != int64(len(wantAll)) {
		t.Fatalf("tag filters let through %d (want %d) and %d (want %d)", anyCol.total.Load(), len(wantAny), allCol.total.Load(), len(wantAll))
	}
}

func TestBroker_RetryAndDeadLetter(t *testing.T) {
	b := startBroker(t, t.TempDir())
	p := newProducer(t, b.addr())
	c := newConsumer(t, "c1", b.addr())
	var mu sync.Mutex
	attempts := map[string][]int{}
	bodies := map[string]string{}
	var retryAsked, retryCame time.Time // the RetryAfter message's two deliveries
	handler := func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		if string(m.Body) == "retry-after" {
			if m.Attempts == 0 {
				retryAsked = time.Now() // before the handler returns RetryAfter
			} else {
				retryCame = time.Now()
			}
		}
		attempts[m.ID] = append(attempts[m.ID], m.Attempts)
		bodies[m.ID] = string(m.Body)
		mu.Unlock()
		if m.Subject != "jobs" {
			t.Errorf("handler saw subject %q", m.Subject)
		}
		switch string(m.Body) {
		case "fail-once":
			if m.Attempts == 0 {
				return errors.New("transient")
			}
		case "fail-always":
			return errors.New("permanent")
		case "retry-after":
			if m.Attempts == 0 {
				return consumer.RetryAfter(300*time.Millisecond, nil)
			}
		}
		return nil
	}
	if _, err := c.Subscribe("jobs", "workers", handler, consumer.StartEarliest(), consumer.MaxAttempts(3),
		consumer.RetryBackoff(50*time.Millisecond, 200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	kinds := []string{"ok", "fail-once", "fail-always", "retry-after"}
	ids := sendN(t, p, "jobs", 4, func(i int, m *producer.Message) { m.Body = []byte(kinds[i]) })
	testutil.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		want := map[string]int{ids[0]: 1, ids[1]: 2, ids[2]: 3, ids[3]: 2}
		for id, n := range want {
			if len(attempts[id]) != n {
				return fmt.Errorf("message %s (%s) delivered %d times, want %d", id, bodies[id], len(attempts[id]), n)
			}
		}
		return nil
	})
	mu.Lock()
	if early := retryCame.Sub(retryAsked); early < 300*time.Millisecond {
		t.Fatalf("RetryAfter(300ms) message came back %v after its handler asked", early)
	}
	if got := attempts[ids[2]]; got[0] != 0 || got[1] != 1 || got[2] != 2 {
		t.Fatalf("attempt counts %v", got)
	}
	mu.Unlock()
	// The permanently failing message is in the dead letters.
	tc, _ := transport.New(fastTransport, nil)
	defer tc.Close()
	testutil.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		resp, err := tc.Call(context.Background(), b.addr(), protocol.CmdDeadLetters, protocol.AppendDeadLettersRequest(nil,
			&protocol.DeadLettersRequest{Action: protocol.DeadLettersList, Subject: "jobs", Group: "workers", Max: 10}))
		if err != nil {
			return err
		}
		dl, err := protocol.DecodeDeadLettersResponse(resp)
		if err != nil {
			return err
		}
		if len(dl.Letters) != 1 {
			return fmt.Errorf("%d dead letters", len(dl.Letters))
		}
		m, err := protocol.DecodeMessage(dl.Letters[0].Message)
		if err != nil || m.ID != ids[2] || m.Attempts != 3 {
			return fmt.Errorf("dead letter %+v %v", m, err)
		}
		return nil
	})
}

func TestBroker_Broadcast(t *testing.T) {
	b := startBroker(t, t.TempDir())
	p := newProducer(t, b.addr())
	cols := []*collector{newCollector(), newCollector()}
	for i, col := range cols {
		c := newConsumer(t, fmt.Sprintf("node-%d", i), b.addr())
		if _, err := c.Subscribe("config", "cache", col.handler, consumer.Broadcast()); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // both subscribers start at latest
	ids := sendN(t, p, "config", 300, nil)
	for _, col := range cols {
		col.waitAll(t, ids, 20*time.Second)
	}
}

// Consumers join and leave while messages flow: every message is handled,
// and none twice (nothing failed).
func TestBroker_ConsumersJoinAndLeave(t *testing.T) {
	b := startBroker(t, t.TempDir())
	p := newProducer(t, b.addr())
	col := newCollector()
	first := newConsumer(t, "stay", b.addr())
	if _, err := first.Subscribe("stream", "g", col.handler, consumer.StartEarliest()); err != nil {
		t.Fatal(err)
	}
	var ids []string
	var idsMu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20 {
			got := sendN(t, p, "stream", 200, nil)
			idsMu.Lock()
			ids = append(ids, got...)
			idsMu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	for i := range 6 {
		c, err := consumer.New(consumer.WithBrokers(b.addr()), consumer.WithConsumerID(fmt.Sprintf("temp-%d", i)),
			consumer.WithTransportOptions(fastTransport))
		if err != nil {
			t.Fatal(err)
		}
		// StartEarliest as "stay": whichever pull creates the group must
		// start it before the first messages, already stored by then.
		if _, err := c.Subscribe("stream", "g", col.handler, consumer.Concurrency(2), consumer.StartEarliest()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(80 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	<-done
	col.waitAll(t, ids, 30*time.Second)
	if d := col.duplicates(); d != 0 {
		t.Fatalf("%d duplicate deliveries though nothing failed", d)
	}
}

// The broker restarts under clients: they reconnect and nothing acked is
// lost.
func TestBroker_RestartWithClientsAttached(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir)
	addr := b.addr()
	p := newProducer(t, addr)
	col := newCollector()
	c := newConsumer(t, "c1", addr)
	if _, err := c.Subscribe("s", "g", col.handler, consumer.StartEarliest()); err != nil {
		t.Fatal(err)
	}
	ids := sendN(t, p, "s", 300, nil)
	col.waitAll(t, ids, 20*time.Second)
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	b2 := startBroker(t, dir, func(o *realtime.Options) { o.Addr = addr })
	_ = b2
	more := sendN(t, p, "s", 300, nil)
	col.waitAll(t, more, 30*time.Second)
	if d := col.duplicates(); d > 0 {
		t.Logf("%d duplicates around the restart (allowed: at-least-once)", d)
	}
}

// TestBroker_PipelinedPullsKeepOrder: a consumer keeping several pulls in
// flight (PullDepth) gets every message once and in the order of the
// subject's log, as one that waits for each answer does, and its pulls after
// the first say they are pipelined.
func TestBroker_PipelinedPullsKeepOrder(t *testing.T) {
	b := startBroker(t, t.TempDir())
	p := newProducer(t, b.addr())
	const n = 5000
	ids := sendN(t, p, "ordered", n, nil)
	var orders [][]string
	for _, depth := range []int{1, 3} {
		var mu sync.Mutex
		var got []string
		c := newConsumer(t, fmt.Sprint("c", depth), b.addr())
		if _, err := c.Subscribe("ordered", fmt.Sprint("depth", depth), func(ctx context.Context, m *consumer.Message) error {
			mu.Lock()
			got = append(got, m.ID)
			mu.Unlock()
			return nil
		}, consumer.StartEarliest(), consumer.PullBatch(16), consumer.MaxUnacked(64), consumer.PullDepth(depth)); err != nil {
			t.Fatal(err)
		}
		testutil.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(got) < n {
				return fmt.Errorf("depth %d: %d of %d messages", depth, len(got), n)
			}
			return nil
		})
		time.Sleep(100 * time.Millisecond) // a re-delivery would show up as an extra message
		mu.Lock()
		orders = append(orders, append([]string(nil), got...))
		mu.Unlock()
		pipelined := counterValue(t, b.Registry(), "qmq_realtime_pulls_pipelined_total")
		if depth == 1 && pipelined != 0 {
			t.Fatalf("depth 1 sent %v pipelined pulls", pipelined)
		}
		if depth > 1 && pipelined == 0 {
			t.Fatalf("depth %d sent no pipelined pulls", depth)
		}
	}
	seen := map[string]bool{}
	for _, id := range orders[1] {
		if seen[id] {
			t.Fatalf("message %s delivered twice", id)
		}
		seen[id] = true
	}
	for _, id := range ids {
		if !seen[id] {
			t.Fatalf("message %s never delivered", id)
		}
	}
	if fmt.Sprint(orders[0]) != fmt.Sprint(orders[1]) {
		first := 0
		for first < len(orders[0]) && orders[0][first] == orders[1][first] {
			first++
		}
		t.Fatalf("pipelined pulls delivered in another order than plain ones (lengths %d, %d; first difference at %d: %v against %v)",
			len(orders[0]), len(orders[1]), first, orders[0][first:min(first+4, len(orders[0]))], orders[1][first:min(first+4, len(orders[1]))])
	}
}

// TestBroker_PipelinedPullsAcrossRestart: a consumer with several pulls in
// flight through a backlog loses nothing when the broker restarts under it:
// the answers in flight fail, and what they held comes back.
func TestBroker_PipelinedPullsAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir)
	addr := b.addr()
	p := newProducer(t, addr)
	ids := sendN(t, p, "backlog", 2000, nil)
	col := newCollector()
	// Half a millisecond a message: the backlog lasts past the restart, and
	// the consumer keeps finishing what it holds while the broker is down.
	slow := func(ctx context.Context, m *consumer.Message) error {
		time.Sleep(500 * time.Microsecond)
		return col.handler(ctx, m)
	}
	// A breaker that opens while the broker is down waits 100 ms (not the
	// default second) before its probe, so the wait below measures the
	// consumer's own back-offs.
	topts := fastTransport
	topts.BreakerOpenTimeout = 100 * time.Millisecond
	c, err := consumer.New(consumer.WithBrokers(addr), consumer.WithConsumerID("c1"), consumer.WithLogger(zaptest.NewLogger(t)),
		consumer.WithTransportOptions(topts))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Subscribe("backlog", "g", slow, consumer.StartEarliest(), consumer.PullBatch(32),
		consumer.MaxUnacked(256), consumer.PullDepth(3)); err != nil {
		t.Fatal(err)
	}
	testutil.CheckFor(t, 20*time.Second, time.Millisecond, func() error {
		if n := col.total.Load(); n < 300 {
			return fmt.Errorf("%d handled before the restart", n)
		}
		return nil
	})
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := col.total.Load(); n >= int64(len(ids)) {
		t.Fatalf("the backlog was drained (%d) before the restart", n)
	}
	handled := col.total.Load()
	startBroker(t, dir, func(o *realtime.Options) { o.Addr = addr })
	restarted := time.Now()
	// Up to MaxUnacked (256) messages were pulled before the restart.
	for col.total.Load() <= handled+256 {
		// The pull loop backs off 50 ms, 100 ms, … while the broker is
		// down; acks failing meanwhile must not open the breaker for
		// seconds (they retried at once, and the consumer stalled ~5 s).
		if time.Since(restarted) > 3*time.Second {
			t.Fatalf("no message pulled from the restarted broker in 3 s (%d handled since)", col.total.Load()-handled)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("deliveries resumed %v after the restart", time.Since(restarted))
	col.waitAll(t, ids, 60*time.Second)
	if d := col.duplicates(); d > 0 {
		t.Logf("%d duplicates around the restart (allowed: at-least-once)", d)
	}
}

func TestBroker_BadInput(t *testing.T) {
	b := startBroker(t, t.TempDir())
	tc, _ := transport.New(fastTransport, nil)
	defer tc.Close()
	ctx := context.Background()
	loose := protocol.DefaultLimits
	loose.MaxBody = 8 << 20
	big, _ := protocol.AppendMessage(nil, &protocol.Message{Subject: "s", ID: "big", Body: make([]byte, 5<<20)}, loose)
	good, _ := protocol.AppendMessage(nil, &protocol.Message{Subject: "s", ID: "good", Body: []byte("x")}, loose)
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)-1] ^= 1
	resp, err := tc.Call(ctx, b.addr(), protocol.CmdSend, protocol.AppendSendRequest(nil, 0, [][]byte{big, good, corrupt, []byte("junk")}))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := protocol.DecodeSendResponse(resp)
	want := []protocol.Status{protocol.StatusTooLarge, protocol.StatusOK, protocol.StatusInvalid, protocol.StatusBadRequest}
	for i := range want {
		if st[i] != want[i] {
			t.Fatalf("statuses %v, want %v", st, want)
		}
	}
	if _, err := tc.Call(ctx, b.addr(), protocol.CmdSend, []byte{1, 2, 3}); !errors.Is(err, protocol.ErrBadRequest) {
		t.Fatalf("malformed send body: %v", err)
	}
	// Whole messages and then a truncated one, or trailing bytes: the
	// request is refused whole (its messages are split as they are
	// checked, and none is stored or remembered before the end is read);
	// resent well-formed, they are stored, not answered "duplicate".
	first, _ := protocol.AppendMessage(nil, &protocol.Message{Subject: "s", ID: "first", Body: []byte("1")}, loose)
	second, _ := protocol.AppendMessage(nil, &protocol.Message{Subject: "s", ID: "second", Body: []byte("2")}, loose)
	whole := protocol.AppendSendRequest(nil, 0, [][]byte{first, second})
	for name, body := range map[string][]byte{
		"truncated": whole[:len(whole)-3],
		"trailing":  append(append([]byte(nil), whole...), 0),
		"short":     binary.BigEndian.AppendUint32(append([]byte(nil), whole[:8]...), 3), // claims 3, carries 0
	} {
		if name == "short" {
			body = append(body, whole[12:]...) // the two messages: one short of the count
		}
		if _, err := tc.Call(ctx, b.addr(), protocol.CmdSend, body); !errors.Is(err, protocol.ErrBadRequest) {
			t.Fatalf("%s send body: %v, want a bad request", name, err)
		}
	}
	resp, err = tc.Call(ctx, b.addr(), protocol.CmdSend, whole)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := protocol.DecodeSendResponse(resp); len(st) != 2 || st[0] != protocol.StatusOK || st[1] != protocol.StatusOK {
		t.Fatalf("the well-formed resend answered %v, want two StatusOK", st)
	}
	bad := protocol.AppendPullRequest(nil, &protocol.PullRequest{Subject: "bad subject", Group: "g", ConsumerID: "c", Max: 1})
	if _, err := tc.Call(ctx, b.addr(), protocol.CmdPull, bad); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("invalid subject pull: %v", err)
	}
	bad = protocol.AppendPullRequest(nil, &protocol.PullRequest{Subject: "s", Group: "bad/group", ConsumerID: "c", Max: 1})
	if _, err := tc.Call(ctx, b.addr(), protocol.CmdPull, bad); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("invalid group pull: %v", err)
	}
	ack := protocol.AppendAckRequest(nil, &protocol.AckRequest{Subject: "s", Group: "never-pulled", ConsumerID: "c", First: 0, Last: 5})
	if _, err := tc.Call(ctx, b.addr(), protocol.CmdAck, ack); !errors.Is(err, protocol.ErrUnknownGroup) {
		t.Fatalf("ack for an unknown group: %v", err)
	}
	// A malformed frame closes that connection only.
	raw, err := net.Dial("tcp", b.addr())
	if err != nil {
		t.Fatal(err)
	}
	raw.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := raw.Read(make([]byte, 1)); err == nil {
		t.Fatal("server answered garbage")
	}
	raw.Close()
	// The good message is stored and the broker still serves.
	c := newConsumer(t, "c1", b.addr())
	col := newCollector()
	if _, err := c.Subscribe("s", "g", col.handler, consumer.StartEarliest()); err != nil {
		t.Fatal(err)
	}
	col.waitAll(t, []string{"good", "first", "second"}, 10*time.Second)
}

func TestBroker_PullAPI(t *testing.T) {
	b := startBroker(t, t.TempDir())
	p := newProducer(t, b.addr())
	c := newConsumer(t, "c1", b.addr())
	pl, err := c.Puller("manual", "g", consumer.StartEarliest(), consumer.RetryBackoff(50*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ids := sendN(t, p, "manual", 20, nil)
	got := map[string]int{}
	nacked := ""
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < 20 || got[nacked] < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("got %d of 20 (nacked %s seen %d times)", len(got), nacked, got[nacked])
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		msgs, err := pl.Pull(ctx, 8)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			got[m.ID]++
			if nacked == "" {
				nacked = m.ID
				m.Nack(nil)
				continue
			}
			m.Ack()
		}
	}
	sorted := append([]string(nil), ids...)
	sort.Strings(sorted)
	for _, id := range sorted {
		if got[id] == 0 {
			t.Fatalf("message %s never pulled", id)
		}
	}
}

// TestBroker_InlinePulls: with Options.InlinePulls a pull whose group's
// actor is idle is served on the event loop; a consumer gets every message
// once, as it does when every pull goes through the pull workers, and a
// pull that waits (a long poll) is still answered when messages come.
func TestBroker_InlinePulls(t *testing.T) {
	var orders [2][]string // what each broker delivered
	for i, inline := range []bool{false, true} {
		b := startBroker(t, t.TempDir(), func(o *realtime.Options) { o.InlinePulls = inline })
		p := newProducer(t, b.addr())
		const n = 3000
		ids := sendN(t, p, "inline", n, nil)
		var mu sync.Mutex
		var got []string
		c := newConsumer(t, fmt.Sprint("c", inline), b.addr())
		if _, err := c.Subscribe("inline", "g", func(ctx context.Context, m *consumer.Message) error {
			mu.Lock()
			got = append(got, m.ID)
			mu.Unlock()
			return nil
		}, consumer.StartEarliest(), consumer.PullBatch(16), consumer.MaxUnacked(64)); err != nil {
			t.Fatal(err)
		}
		count := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(got)
		}
		testutil.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
			if c := count(); c < n {
				return fmt.Errorf("inline %v: %d of %d messages", inline, c, n)
			}
			return nil
		})
		// The consumer now long-polls the empty tail: a send wakes it.
		late := sendN(t, p, "inline", 1, nil)
		testutil.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
			if c := count(); c < n+1 {
				return fmt.Errorf("inline %v: the message sent to the tail was not delivered", inline)
			}
			return nil
		})
		time.Sleep(100 * time.Millisecond) // a re-delivery would show up as an extra message
		mu.Lock()
		orders[i] = append([]string(nil), got...)
		mu.Unlock()
		want := map[string]bool{}
		for _, id := range append(ids, late...) {
			want[id] = true
		}
		for _, id := range orders[i] {
			if !want[id] {
				t.Fatalf("inline %v: message %s delivered twice (or never sent)", inline, id)
			}
			delete(want, id)
		}
		if len(want) > 0 {
			t.Fatalf("inline %v: %d messages never delivered", inline, len(want))
		}
		served := counterValue(t, b.Registry(), "qmq_realtime_pulls_inline_total")
		if inline && served == 0 {
			t.Fatal("no pull served inline")
		}
		if !inline && served != 0 {
			t.Fatalf("%v pulls served inline with InlinePulls off", served)
		}
	}
}

// TestBroker_InlineLongPollAnsweredOnce: a pull run inline on the event
// loop that finds nothing parks in its actor as a long poll. It must be
// answered once, by the message that comes later, not also at the end of
// the read that brought it (the inline request is detached when it
// parks; an inline request left unanswered gets StatusInternal).
func TestBroker_InlineLongPollAnsweredOnce(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(o *realtime.Options) { o.InlinePulls = true })
	tc, err := transport.New(fastTransport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	type answer struct {
		body []byte
		err  error
	}
	for round := range 3 {
		subject := fmt.Sprint("poll", round)
		got := make(chan answer, 1)
		go func() {
			body, err := tc.Call(context.Background(), b.addr(), protocol.CmdPull, protocol.AppendPullRequest(nil, &protocol.PullRequest{
				Subject: subject, Group: "g", ConsumerID: "c", Max: 8, Timeout: 2 * time.Second,
				Flags: protocol.PullEarliest, KnownPullSeq: -1,
			}))
			got <- answer{body, err}
		}()
		select {
		case a := <-got:
			t.Fatalf("round %d: a pull of an empty subject was answered at once: %d bytes, %v", round, len(a.body), a.err)
		case <-time.After(100 * time.Millisecond):
		}
		raw, _ := protocol.AppendMessage(nil, &protocol.Message{Subject: subject, ID: fmt.Sprint("late", round), Body: []byte("x")}, protocol.DefaultLimits)
		if _, err := tc.Call(context.Background(), b.addr(), protocol.CmdSend, protocol.AppendSendRequest(nil, 0, [][]byte{raw})); err != nil {
			t.Fatal(err)
		}
		a := <-got
		if a.err != nil {
			t.Fatalf("round %d: the long poll failed: %v", round, a.err)
		}
		msgs, err := protocol.DecodePullResponse(a.body)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("round %d: the long poll got %d messages (%v), want the one sent", round, len(msgs), err)
		}
	}
	if served := counterValue(t, b.Registry(), "qmq_realtime_pulls_inline_total"); served == 0 {
		t.Fatal("no pull served inline")
	}
}

package outbox

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/transport"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"
)

// fastTransport redials quickly, for tests that stop and restart a broker.
var fastTransport = transport.Options{RedialBackoffMin: 10 * time.Millisecond, RedialBackoffMax: 100 * time.Millisecond,
	RequestTimeout: 2 * time.Second}

// startBroker runs a realtime broker on addr ("127.0.0.1:0" for any port)
// with its data in dir; it is closed when the test ends (closing it twice is
// harmless).
func startBroker(t testing.TB, dir, addr string) *realtime.Broker {
	t.Helper()
	o := realtime.NewOptions()
	o.Addr, o.HTTPAddr, o.DataDir, o.SegmentSize = addr, "", dir, 8<<20
	b, err := realtime.New(o, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	return b
}

// startDelay runs a delay server forwarding to realtimeAddr.
func startDelay(t testing.TB, dir, realtimeAddr string) *delay.Server {
	t.Helper()
	o := delay.NewOptions()
	o.Addr, o.HTTPAddr, o.DataDir, o.Realtime = "127.0.0.1:0", "", dir, []string{realtimeAddr}
	s, err := delay.New(o, nil, nil, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// newProducer returns a producer to the realtime broker at addr (and the
// delay server at delayAddr when not empty), closed when the test ends.
func newProducer(t testing.TB, addr, delayAddr string, opts ...producer.Option) *producer.Producer {
	t.Helper()
	var delayGroups []route.Group
	if delayAddr != "" {
		delayGroups = route.Groups(delayAddr)
	}
	opts = append([]producer.Option{producer.WithResolver(route.NewStatic(route.Groups(addr), delayGroups)),
		producer.WithTransportOptions(fastTransport)}, opts...)
	p, err := producer.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// newOutbox returns an outbox on e's table through db (nil: e.db), closed
// when the test ends.
func newOutbox(t testing.TB, e *dbEnv, db *sql.DB, s Sender, opts ...Option) *Outbox {
	t.Helper()
	if db == nil {
		db = e.db
	}
	opts = append([]Option{WithTable(e.table), WithLogger(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))}, opts...)
	o, err := New(db, e.dialect, s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		o.Close(ctx)
	})
	return o
}

// rig starts a broker and returns its address, a collector of subject's
// deliveries and a producer to it.
func rig(t testing.TB, subject string) (string, *collector, *producer.Producer) {
	t.Helper()
	addr := startBroker(t, t.TempDir(), "127.0.0.1:0").Addr().String()
	return addr, collect(t, addr, subject), newProducer(t, addr, "")
}

// received is one delivery a collector saw.
type received struct {
	msg *consumer.Message
	at  time.Time
}

// collector subscribes to a subject and records every delivery.
type collector struct {
	mu   sync.Mutex
	got  map[string][]received
	wake chan struct{}
}

func collect(t testing.TB, addr, subject string) *collector {
	t.Helper()
	c, err := consumer.New(consumer.WithBrokers(addr), consumer.WithConsumerID("outbox-test"),
		consumer.WithTransportOptions(fastTransport))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	col := &collector{got: map[string][]received{}, wake: make(chan struct{}, 1)}
	if _, err := c.Subscribe(subject, "g", func(ctx context.Context, m *consumer.Message) error {
		col.mu.Lock()
		col.got[m.ID] = append(col.got[m.ID], received{m, time.Now()})
		col.mu.Unlock()
		return nil
	}, consumer.StartEarliest(), consumer.PullTimeout(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	return col
}

// deliveries returns how often id was delivered.
func (c *collector) deliveries(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got[id])
}

// first returns id's first delivery.
func (c *collector) first(id string) (received, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.got[id]
	if len(r) == 0 {
		return received{}, false
	}
	return r[0], true
}

// total returns the number of deliveries.
func (c *collector) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.got {
		n += len(r)
	}
	return n
}

// waitAll waits until every id was delivered at least once.
func (c *collector) waitAll(t testing.TB, timeout time.Duration, ids ...string) {
	t.Helper()
	waitFor(t, timeout, "every message delivered", func() bool {
		for _, id := range ids {
			if c.deliveries(id) == 0 {
				return false
			}
		}
		return true
	})
}

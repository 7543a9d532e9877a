package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/producer"
)

// value reads a counter's or a gauge's value.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// order writes a business row and a message about it in tx, as an
// application would.
func order(ctx context.Context, e *dbEnv, tx *Tx, id, subject string) (*producer.Message, error) {
	if _, err := tx.ExecContext(ctx, e.q("INSERT INTO "+e.business+" (id, state) VALUES (?, ?)"), id, "paid"); err != nil {
		return nil, err
	}
	msg := &producer.Message{
		Subject:    subject,
		Tags:       []string{"hotel", "paid"},
		Properties: []producer.Property{{Key: "order", Value: id}, {Key: "key", Value: "k-" + id}},
		Body:       []byte(`{"order":"` + id + `","state":"paid"}`),
	}
	return msg, tx.Send(ctx, msg)
}

// marker commits one more message through o and waits until it is
// delivered: with one broker group, whatever was sent before it has been
// delivered by then too.
func marker(t *testing.T, e *dbEnv, o *Outbox, col *collector, subject string) {
	t.Helper()
	var msg *producer.Message
	if err := o.Transact(context.Background(), nil, func(tx *Tx) error {
		var err error
		msg, err = order(context.Background(), e, tx, fmt.Sprintf("marker-%d", tableSeq.Add(1)), subject)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	col.waitAll(t, 20*time.Second, msg.ID)
}

func TestCommitDeliversOnce(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := context.Background()
		_, col, p := rig(t, "order.paid")
		reg := prometheus.NewRegistry()
		// A minute's delay: only the send after commit can deliver in time.
		o := newOutbox(t, e, nil, p, WithDelay(time.Minute), WithRegisterer(reg))

		var msg *producer.Message
		if err := o.Transact(ctx, nil, func(tx *Tx) error {
			var err error
			msg, err = order(ctx, e, tx, "o-1", "order.paid")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if len(msg.ID) != 26 || msg.Created.IsZero() {
			t.Fatalf("Send did not fill in the id and time: %q %v", msg.ID, msg.Created)
		}
		col.waitAll(t, 10*time.Second, msg.ID)
		got, _ := col.first(msg.ID)
		m := got.msg
		if m.Subject != msg.Subject || string(m.Body) != string(msg.Body) || strings.Join(m.Tags, ",") != "hotel,paid" ||
			m.Created.UnixMilli() != msg.Created.UnixMilli() {
			t.Fatalf("delivered %+v, sent %+v", m, msg)
		}
		if v, _ := m.Property("key"); v != "k-o-1" {
			t.Fatalf("property key = %q", v)
		}
		waitFor(t, 10*time.Second, "row deleted after the ack", func() bool { return e.count(t, e.table, "") == 0 })
		marker(t, e, o, col, "order.paid")
		if n := col.deliveries(msg.ID); n != 1 {
			t.Fatalf("delivered %d times", n)
		}
		if n := e.count(t, e.business, "id = ?", "o-1"); n != 1 {
			t.Fatalf("business row count %d", n)
		}
		// The counter moves in the send's callback, which may run after the
		// consumer already has the marker.
		sent := o.metrics.sent.WithLabelValues(pathCommit)
		waitFor(t, 10*time.Second, "two sends counted", func() bool { return value(sent) >= 2 })
		if v := value(sent); v != 2 {
			t.Fatalf("qmq_outbox_messages_sent_total{path=commit} = %v, want 2", v)
		}
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		registered := map[string]int{}
		for _, f := range families {
			registered[f.GetName()] = len(f.GetMetric())
		}
		if registered["qmq_outbox_messages_sent_total"] != 2 || registered["qmq_outbox_rows_waiting"] != 1 {
			t.Fatalf("registered series: %v", registered)
		}
	})
}

func TestRollbackNeverSends(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := context.Background()
		_, col, p := rig(t, "order.paid")
		o := newOutbox(t, e, nil, p, WithDelay(50*time.Millisecond), WithScanInterval(20*time.Millisecond))
		var ids []string

		// fn fails: Transact rolls back.
		boom := errors.New("payment declined")
		err := o.Transact(ctx, nil, func(tx *Tx) error {
			msg, err := order(ctx, e, tx, "r-1", "order.paid")
			if err != nil {
				return err
			}
			ids = append(ids, msg.ID)
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Transact = %v, want fn's error", err)
		}
		// fn panics: Transact rolls back and the panic goes on.
		func() {
			defer func() {
				if r := recover(); r != "crash" {
					t.Fatalf("recovered %v", r)
				}
			}()
			o.Transact(ctx, nil, func(tx *Tx) error {
				msg, err := order(ctx, e, tx, "r-2", "order.paid")
				if err != nil {
					return err
				}
				ids = append(ids, msg.ID)
				panic("crash")
			})
		}()
		// An explicit Rollback.
		tx, err := o.Begin(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := order(ctx, e, tx, "r-3", "order.paid")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, msg.ID)
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); !errors.Is(err, ErrTxDone) {
			t.Fatalf("Commit after Rollback = %v, want ErrTxDone", err)
		}
		if err := tx.Send(ctx, &producer.Message{Subject: "order.paid"}); !errors.Is(err, ErrTxDone) {
			t.Fatalf("Send after Rollback = %v, want ErrTxDone", err)
		}

		marker(t, e, o, col, "order.paid")
		// Several watchdog scans (delay 50 ms, every 20 ms) have passed
		// too by the time the marker's row is gone.
		waitFor(t, 10*time.Second, "outbox table empty", func() bool { return e.count(t, e.table, "") == 0 })
		for _, id := range ids {
			if n := col.deliveries(id); n != 0 {
				t.Fatalf("rolled-back message %s delivered %d times", id, n)
			}
		}
		if n := e.count(t, e.business, "id LIKE ?", "r-%"); n != 0 {
			t.Fatalf("%d rolled-back business rows", n)
		}
	})
}

func TestCommittedElsewhere(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := context.Background()
		_, col, p := rig(t, "order.paid")
		o := newOutbox(t, e, nil, p, WithDelay(time.Minute))

		// Committed by the framework, then Committed: sent at once.
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		otx := o.Wrap(tx)
		sent, err := order(ctx, e, otx, "c-1", "order.paid")
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := otx.Committed(ctx); err != nil {
			t.Fatal(err)
		}
		if err := otx.Committed(ctx); !errors.Is(err, ErrTxDone) {
			t.Fatalf("second Committed = %v, want ErrTxDone", err)
		}
		col.waitAll(t, 10*time.Second, sent.ID)

		// Rolled back by the framework, then Committed by mistake: not sent.
		tx, err = e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		otx = o.Wrap(tx)
		rolledBack, err := order(ctx, e, otx, "c-2", "order.paid")
		if err != nil {
			t.Fatal(err)
		}
		tx.Rollback()
		if err := otx.Committed(ctx); err != nil {
			t.Fatal(err)
		}

		// Committed called before the commit: nothing is sent then; the
		// row waits for a watchdog.
		tx, err = e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		otx = o.Wrap(tx)
		early, err := order(ctx, e, otx, "c-3", "order.paid")
		if err != nil {
			t.Fatal(err)
		}
		if err := otx.Committed(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}

		marker(t, e, o, col, "order.paid")
		if n := col.deliveries(rolledBack.ID); n != 0 {
			t.Fatalf("rolled-back message delivered %d times", n)
		}
		if n := col.deliveries(early.ID); n != 0 {
			t.Fatalf("message of a transaction not yet committed was sent (%d)", n)
		}
		if n := e.count(t, e.table, "id = ?", early.ID); n != 1 {
			t.Fatalf("row of the early Committed: %d", n)
		}
		// Another instance's watchdog sends it.
		newOutbox(t, e, e.open(t), p, WithDelay(10*time.Millisecond), WithScanInterval(20*time.Millisecond))
		col.waitAll(t, 10*time.Second, early.ID)
		if n := col.deliveries(sent.ID); n != 1 {
			t.Fatalf("message delivered %d times", n)
		}
	})
}

func TestDatabaseErrorInSend(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := context.Background()
		_, col, p := rig(t, "order.paid")
		o := newOutbox(t, e, nil, p, WithDelay(50*time.Millisecond), WithScanInterval(20*time.Millisecond))
		var ids []string

		// The second message reuses the first one's id: its insert fails.
		err := o.Transact(ctx, nil, func(tx *Tx) error {
			msg, err := order(ctx, e, tx, "e-1", "order.paid")
			if err != nil {
				return err
			}
			ids = append(ids, msg.ID)
			return tx.Send(ctx, &producer.Message{ID: msg.ID, Subject: "order.paid", Body: []byte("again")})
		})
		if err == nil || !strings.Contains(err.Error(), "insert message") {
			t.Fatalf("Transact = %v, want the failed insert", err)
		}

		// The outbox table is missing (dropped by mistake).
		broken := newOutbox(t, e, nil, p, WithTable("missing_"+e.table))
		err = broken.Transact(ctx, nil, func(tx *Tx) error {
			msg, err := order(ctx, e, tx, "e-2", "order.paid")
			if msg != nil {
				ids = append(ids, msg.ID)
			}
			return err
		})
		if err == nil {
			t.Fatal("Send into a missing table succeeded")
		}

		// The connection dies in the middle of the transaction.
		if e.dialect != SQLite {
			err = o.Transact(ctx, nil, func(tx *Tx) error {
				if _, err := tx.ExecContext(ctx, e.q("INSERT INTO "+e.business+" (id, state) VALUES (?, ?)"), "e-3", "paid"); err != nil {
					return err
				}
				killSession(t, e, tx)
				msg := &producer.Message{Subject: "order.paid", Body: []byte("lost connection")}
				err := tx.Send(ctx, msg)
				ids = append(ids, msg.ID)
				return err
			})
			if err == nil {
				t.Fatal("Send on a killed connection succeeded")
			}
		}

		marker(t, e, o, col, "order.paid")
		waitFor(t, 10*time.Second, "outbox table empty", func() bool { return e.count(t, e.table, "") == 0 })
		for _, id := range ids {
			if n := col.deliveries(id); n != 0 {
				t.Fatalf("message %s of a failed transaction delivered %d times", id, n)
			}
		}
		if n := e.count(t, e.business, "id LIKE ?", "e-%"); n != 0 {
			t.Fatalf("%d business rows of failed transactions", n)
		}
	})
}

// killSession ends tx's database session from another connection.
func killSession(t *testing.T, e *dbEnv, tx *Tx) {
	t.Helper()
	var pid int64
	var kill string
	switch e.dialect {
	case Postgres:
		if err := tx.QueryRow("SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		kill = fmt.Sprintf("SELECT pg_terminate_backend(%d)", pid)
	case MySQL:
		if err := tx.QueryRow("SELECT CONNECTION_ID()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		kill = fmt.Sprintf("KILL %d", pid)
	}
	if _, err := e.db.Exec(kill); err != nil {
		t.Fatal(err)
	}
}

func TestBrokerDownRowsWait(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := context.Background()
		dir, addr := t.TempDir(), testutil.ReusableAddr(t)
		b := startBroker(t, dir, addr)
		col := collect(t, addr, "order.paid")
		p := newProducer(t, addr, "", producer.WithSendTimeout(300*time.Millisecond), producer.WithRequestTimeout(200*time.Millisecond))
		reg := prometheus.NewRegistry()
		o := newOutbox(t, e, nil, p, WithDelay(200*time.Millisecond), WithScanInterval(50*time.Millisecond),
			WithRetryBackoff(100*time.Millisecond, 300*time.Millisecond), WithSendTimeout(time.Second),
			WithStatsInterval(50*time.Millisecond), WithRegisterer(reg))
		if err := b.Close(ctx); err != nil {
			t.Fatal(err)
		}

		const n = 10
		var ids []string
		for i := range n {
			if err := o.Transact(ctx, nil, func(tx *Tx) error {
				msg, err := order(ctx, e, tx, fmt.Sprintf("d-%d", i), "order.paid")
				if msg != nil {
					ids = append(ids, msg.ID)
				}
				return err
			}); err != nil {
				t.Fatalf("commit with the broker down: %v", err)
			}
		}
		waitFor(t, 20*time.Second, "the watchdog tried every row and failed", func() bool {
			return e.count(t, e.table, "attempts >= 1") == n
		})
		waitFor(t, 10*time.Second, "gauges show the waiting rows", func() bool {
			return value(o.metrics.waiting) == n && value(o.metrics.oldest) > 0
		})
		st, err := o.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Waiting != n || st.Failed != 0 || st.OldestWaiting <= 0 {
			t.Fatalf("stats %+v", st)
		}
		if f := value(o.metrics.failures.WithLabelValues(pathCommit)); f < n {
			t.Fatalf("commit-path failures %v, want ≥ %d", f, n)
		}
		if col.total() != 0 {
			t.Fatal("delivered with the broker down")
		}

		startBroker(t, dir, addr)
		col.waitAll(t, 30*time.Second, ids...)
		waitFor(t, 10*time.Second, "outbox table empty", func() bool { return e.count(t, e.table, "") == 0 })
		marker(t, e, o, col, "order.paid")
		for _, id := range ids {
			if c := col.deliveries(id); c != 1 {
				t.Fatalf("message %s delivered %d times", id, c)
			}
		}
	})
}

// tracker wraps a sender and records, per message id, how many sends are
// in flight at once across every outbox that uses it.
type tracker struct {
	next     Sender
	mu       sync.Mutex
	inflight map[string]int
	sends    map[string]int
	byName   map[string]int
	overlaps []string
}

func newTracker(next Sender) *tracker {
	return &tracker{next: next, inflight: map[string]int{}, sends: map[string]int{}, byName: map[string]int{}}
}

// as returns a Sender that counts its sends under name.
func (tr *tracker) as(name string) Sender { return trackedSender{tr, name} }

type trackedSender struct {
	tr   *tracker
	name string
}

func (s trackedSender) SendAsync(msg *producer.Message, cb func(*producer.Message, error)) error {
	tr := s.tr
	tr.mu.Lock()
	if tr.inflight[msg.ID] > 0 {
		tr.overlaps = append(tr.overlaps, msg.ID)
	}
	tr.inflight[msg.ID]++
	tr.sends[msg.ID]++
	tr.byName[s.name]++
	tr.mu.Unlock()
	time.Sleep(200 * time.Microsecond) // widen the window a second sender would hit
	return tr.next.SendAsync(msg, func(m *producer.Message, err error) {
		tr.mu.Lock()
		tr.inflight[msg.ID]--
		tr.mu.Unlock()
		cb(m, err)
	})
}

func TestTwoWatchdogsNeverSendOneRowAtOnce(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := context.Background()
		_, col, p := rig(t, "order.paid")

		// Rows left behind: committed without handing the messages over.
		writer := newOutbox(t, e, nil, p, WithoutWatchdog())
		const n = 300
		tx, err := writer.Begin(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for i := range n {
			msg := &producer.Message{Subject: "order.paid", Body: fmt.Appendf(nil, "m%d", i)}
			if err := tx.Send(ctx, msg); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, msg.ID)
		}
		if err := tx.Tx.Commit(); err != nil {
			t.Fatal(err)
		}

		tr := newTracker(p)
		opts := []Option{WithDelay(time.Millisecond), WithBatch(10), WithScanInterval(5 * time.Millisecond)}
		newOutbox(t, e, e.open(t), tr.as("a"), opts...)
		newOutbox(t, e, e.open(t), tr.as("b"), opts...)
		col.waitAll(t, 60*time.Second, ids...)
		waitFor(t, 10*time.Second, "outbox table empty", func() bool { return e.count(t, e.table, "") == 0 })

		tr.mu.Lock()
		defer tr.mu.Unlock()
		if len(tr.overlaps) > 0 {
			t.Fatalf("%d messages were sent by two watchdogs at once (first %s)", len(tr.overlaps), tr.overlaps[0])
		}
		for _, id := range ids {
			if tr.sends[id] != 1 {
				t.Fatalf("message %s sent %d times", id, tr.sends[id])
			}
		}
		if tr.byName["a"] == 0 || tr.byName["b"] == 0 {
			t.Fatalf("one watchdog did all the work (%v): the test proves nothing", tr.byName)
		}
		t.Logf("watchdog a sent %d, b sent %d", tr.byName["a"], tr.byName["b"])
	})
}

func TestDelayedMessagesThroughOutbox(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := context.Background()
		b := startBroker(t, t.TempDir(), "127.0.0.1:0")
		addr := b.Addr().String()
		d := startDelay(t, t.TempDir(), addr)
		col := collect(t, addr, "order.remind")
		p := newProducer(t, addr, d.Addr().String())
		o := newOutbox(t, e, nil, p, WithDelay(100*time.Millisecond), WithScanInterval(20*time.Millisecond))

		// Sent at commit.
		atCommit := &producer.Message{Subject: "order.remind", Body: []byte("at commit"), DeliverAt: time.Now().Add(1200 * time.Millisecond)}
		if err := o.Transact(ctx, nil, func(tx *Tx) error { return tx.Send(ctx, atCommit) }); err != nil {
			t.Fatal(err)
		}
		// Left behind and sent by the watchdog.
		tx, err := o.Begin(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		byWatchdog := &producer.Message{Subject: "order.remind", Body: []byte("by watchdog"), DeliverAt: time.Now().Add(1500 * time.Millisecond)}
		if err := tx.Send(ctx, byWatchdog); err != nil {
			t.Fatal(err)
		}
		if err := tx.Tx.Commit(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "outbox table empty", func() bool { return e.count(t, e.table, "") == 0 })
		if col.total() != 0 {
			t.Fatal("a delayed message was delivered before its time")
		}
		col.waitAll(t, 20*time.Second, atCommit.ID, byWatchdog.ID)
		for _, m := range []*producer.Message{atCommit, byWatchdog} {
			got, _ := col.first(m.ID)
			// DeliverAt is a wall-clock time (it travels as Unix
			// milliseconds): compare wall clocks, as the consumer does
			// before it hands a message over, not the monotonic readings
			// time.Now left in both (a step of the wall clock between
			// the send and the delivery moves them apart: one gate run saw
			// deliveries 0.08 and 0.6 ms "early" by them).
			if got.at.Round(0).Before(m.DeliverAt.Round(0)) {
				t.Fatalf("%s delivered %v before its time", m.Body, m.DeliverAt.Sub(got.at))
			}
			if !got.msg.DeliverAt.Equal(m.DeliverAt.Truncate(time.Millisecond).Add(time.Millisecond)) &&
				!got.msg.DeliverAt.Equal(m.DeliverAt.Truncate(time.Millisecond)) {
				t.Fatalf("%s: deliver-at %v, sent %v", m.Body, got.msg.DeliverAt, m.DeliverAt)
			}
		}
	})
}

func TestBadRowMarkedFailed(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := context.Background()
		_, col, p := rig(t, "order.paid")
		writer := newOutbox(t, e, nil, p, WithoutWatchdog())
		tx, err := writer.Begin(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		bad := &producer.Message{Subject: "order.paid", Body: []byte("will be corrupted")}
		if err := tx.Send(ctx, bad); err != nil {
			t.Fatal(err)
		}
		if err := tx.Tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.db.Exec(e.q("UPDATE "+e.table+" SET message = ? WHERE id = ?"), []byte("not a message"), bad.ID); err != nil {
			t.Fatal(err)
		}
		o := newOutbox(t, e, e.open(t), p, WithDelay(time.Millisecond), WithScanInterval(10*time.Millisecond),
			WithStatsInterval(20*time.Millisecond))
		waitFor(t, 10*time.Second, "row marked failed", func() bool {
			return e.count(t, e.table, "state = 1 AND last_error IS NOT NULL") == 1
		})
		waitFor(t, 10*time.Second, "failed gauge", func() bool { return value(o.metrics.failed) == 1 })
		st, err := o.Stats(ctx)
		if err != nil || st.Failed != 1 || st.Waiting != 0 {
			t.Fatalf("stats %+v, %v", st, err)
		}
		marker(t, e, o, col, "order.paid")
		if n := col.deliveries(bad.ID); n != 0 {
			t.Fatalf("corrupted row delivered %d times", n)
		}
	})
}

func TestClose(t *testing.T) {
	e := openDB(t, "sqlite")
	ctx := context.Background()
	_, col, p := rig(t, "order.paid")
	o := newOutbox(t, e, nil, p, WithDelay(time.Minute))
	var sent *producer.Message
	if err := o.Transact(ctx, nil, func(tx *Tx) error {
		var err error
		sent, err = order(ctx, e, tx, "x-1", "order.paid")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Close waited for the ack and the delete of what was handed over.
	if n := e.count(t, e.table, "id = ?", sent.ID); n != 0 {
		t.Fatalf("row of an acknowledged message still there after Close")
	}
	col.waitAll(t, 10*time.Second, sent.ID)
	if err := o.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := o.Begin(ctx, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Begin after Close = %v", err)
	}

	// A transaction begun before Close still commits; its row waits for a
	// watchdog.
	o2 := newOutbox(t, e, nil, p, WithDelay(time.Minute))
	tx, err := o2.Begin(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := order(ctx, e, tx, "x-2", "order.paid")
	if err != nil {
		t.Fatal(err)
	}
	if err := o2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, e.table, "id = ?", msg.ID); n != 1 {
		t.Fatalf("row of a transaction committed after Close: %d", n)
	}
}

// Many transactions commit at once: every message arrives once, every row
// is deleted, and Close finds nothing left in flight.
func TestConcurrentCommits(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := context.Background()
		_, col, p := rig(t, "order.paid")
		o := newOutbox(t, e, nil, p, WithDelay(time.Minute))
		const clients, each = 8, 40
		var (
			mu  sync.Mutex
			ids []string
			wg  sync.WaitGroup
		)
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					if err := o.Transact(ctx, nil, func(tx *Tx) error {
						msg, err := order(ctx, e, tx, fmt.Sprintf("m-%d-%d", c, i), "order.paid")
						if err == nil {
							mu.Lock()
							ids = append(ids, msg.ID)
							mu.Unlock()
						}
						return err
					}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		closeCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := o.Close(closeCtx); err != nil {
			t.Fatal(err)
		}
		if n := o.inflightCount(); n != 0 {
			t.Fatalf("%d messages still in flight after Close", n)
		}
		if n := e.count(t, e.table, ""); n != 0 {
			t.Fatalf("%d rows left after Close", n)
		}
		col.waitAll(t, 20*time.Second, ids...)
		for _, id := range ids {
			if n := col.deliveries(id); n != 1 {
				t.Fatalf("message %s delivered %d times", id, n)
			}
		}
	})
}

// With WithSyncSend, Commit returns after the broker's answer: the sent
// counter already counts the transaction's messages.
func TestSyncSend(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := context.Background()
		_, col, p := rig(t, "order.paid")
		// One message: the producer's Send. Three: SendAsync, awaited
		// (the tracker has no Send).
		for _, c := range []struct {
			sender Sender
			n      int
		}{{p, 1}, {newTracker(p).as("t"), 3}} {
			o := newOutbox(t, e, e.open(t), c.sender, WithDelay(time.Minute), WithSyncSend())
			var ids []string
			if err := o.Transact(ctx, nil, func(tx *Tx) error {
				for i := range c.n {
					msg, err := order(ctx, e, tx, fmt.Sprintf("s-%d-%d", c.n, i), "order.paid")
					if err != nil {
						return err
					}
					ids = append(ids, msg.ID)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if v := value(o.metrics.sent.WithLabelValues(pathCommit)); v != float64(c.n) {
				t.Fatalf("%d messages: %v acknowledged when Commit returned", c.n, v)
			}
			col.waitAll(t, 10*time.Second, ids...)
		}
	})
}

// recorder passes messages on to a producer and records how each went.
type recorder struct {
	p       *producer.Producer
	mu      sync.Mutex
	encoded map[string][]byte // SendEncoded: id → bytes
	decoded map[string]bool   // SendAsync: ids
}

func (r *recorder) SendAsync(msg *producer.Message, cb func(*producer.Message, error)) error {
	r.mu.Lock()
	r.decoded[msg.ID] = true
	r.mu.Unlock()
	return r.p.SendAsync(msg, cb)
}

func (r *recorder) SendEncoded(raw []byte, cb func(error)) error {
	v, err := protocol.ParseMessage(raw)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.encoded[string(v.ID)] = append([]byte(nil), raw...)
	r.mu.Unlock()
	return r.p.SendEncoded(raw, cb)
}

// A message due now reaches the producer as the bytes Send wrote into its
// row; a delayed one as a message, so that the producer routes it to a
// delay group.
func TestDueMessagesGoAsTheirBytes(t *testing.T) {
	e := openDB(t, "sqlite")
	ctx := context.Background()
	addr := startBroker(t, t.TempDir(), "127.0.0.1:0").Addr().String()
	d := startDelay(t, t.TempDir(), addr)
	col := collect(t, addr, "order.paid")
	rec := &recorder{p: newProducer(t, addr, d.Addr().String()), encoded: map[string][]byte{}, decoded: map[string]bool{}}
	o := newOutbox(t, e, nil, rec, WithDelay(time.Minute))
	due := &producer.Message{Subject: "order.paid", Tags: []string{"t"}, Body: []byte("now")}
	later := &producer.Message{Subject: "order.paid", Body: []byte("later"), DeliverAt: time.Now().Add(time.Second)}
	if err := o.Transact(ctx, nil, func(tx *Tx) error {
		if err := tx.Send(ctx, due); err != nil {
			return err
		}
		return tx.Send(ctx, later)
	}); err != nil {
		t.Fatal(err)
	}
	col.waitAll(t, 20*time.Second, due.ID, later.ID)
	want, err := protocol.AppendMessage(nil, due, protocol.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !bytes.Equal(rec.encoded[due.ID], want) || rec.decoded[due.ID] {
		t.Fatalf("due message: encoded %x (want %x), decoded %v", rec.encoded[due.ID], want, rec.decoded[due.ID])
	}
	if !rec.decoded[later.ID] || rec.encoded[later.ID] != nil {
		t.Fatal("delayed message was not sent as a message")
	}
}

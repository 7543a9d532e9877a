package delay_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/pkg/transport"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"
	"go.uber.org/zap/zaptest"
)

var fastTransport = transport.Options{RedialBackoffMin: 10 * time.Millisecond, RedialBackoffMax: 100 * time.Millisecond, RequestTimeout: 3 * time.Second}

func startRealtime(t *testing.T, dir, addr string) *realtime.Broker {
	t.Helper()
	o := realtime.NewOptions()
	o.Addr, o.HTTPAddr, o.DataDir, o.SegmentSize = addr, "", dir, 8<<20
	b, err := realtime.New(o, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	return b
}

func startDelay(t *testing.T, dir, addr string, realtimeAddrs ...string) *delay.Server {
	t.Helper()
	o := delay.NewOptions()
	o.Addr, o.HTTPAddr, o.DataDir, o.Realtime = addr, "", dir, realtimeAddrs
	s, err := delay.New(o, nil, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

type receipt struct {
	at        time.Time
	deliverAt time.Time
}

func subscribe(t *testing.T, addr, subject string) (*sync.Mutex, map[string][]receipt) {
	t.Helper()
	c, err := consumer.New(consumer.WithBrokers(addr), consumer.WithConsumerID("c1"), consumer.WithTransportOptions(fastTransport))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	var mu sync.Mutex
	got := map[string][]receipt{}
	if _, err := c.Subscribe(subject, "g", func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		got[m.ID] = append(got[m.ID], receipt{time.Now(), m.DeliverAt})
		mu.Unlock()
		return nil
	}, consumer.StartEarliest(), consumer.Concurrency(4)); err != nil {
		t.Fatal(err)
	}
	return &mu, got
}

// Delayed messages travel producer → delay server → realtime → consumer and
// are never handled before their time.
func TestDelay_NeverEarly(t *testing.T) {
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	dl := startDelay(t, t.TempDir(), "127.0.0.1:0", rt.Addr().String())
	res := route.NewStatic(route.Groups(rt.Addr().String()), route.Groups(dl.Addr().String()))
	p, err := producer.New(producer.WithResolver(res), producer.WithTransportOptions(fastTransport))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	mu, got := subscribe(t, rt.Addr().String(), "timers")
	start := time.Now()
	var ids []string
	for i := range 200 {
		m := &producer.Message{Subject: "timers", Body: []byte(fmt.Sprint(i)),
			DeliverAt: start.Add(600*time.Millisecond + time.Duration(i%20)*50*time.Millisecond)}
		if err := p.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	testutil.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) < len(ids) {
			return fmt.Errorf("%d of %d delivered", len(got), len(ids))
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	var worst time.Duration
	for _, id := range ids {
		for _, r := range got[id] {
			if r.at.Before(r.deliverAt) {
				t.Fatalf("message %s handled %v early", id, r.deliverAt.Sub(r.at))
			}
			worst = max(worst, r.at.Sub(r.deliverAt))
		}
		if len(got[id]) != 1 {
			t.Fatalf("message %s delivered %d times", id, len(got[id]))
		}
	}
	t.Logf("latest delivery %v after its due time", worst)
}

func TestDelay_RefusesBadMessages(t *testing.T) {
	dl := startDelay(t, t.TempDir(), "127.0.0.1:0", "127.0.0.1:1")
	tc, _ := transport.New(fastTransport, nil)
	defer tc.Close()
	loose := protocol.DefaultLimits
	loose.MaxBody = 8 << 20
	far, _ := protocol.AppendMessage(nil, &protocol.Message{Subject: "s", ID: "far", DeliverAt: time.Now().AddDate(3, 0, 0)}, loose)
	big, _ := protocol.AppendMessage(nil, &protocol.Message{Subject: "s", ID: "big", Body: make([]byte, 5<<20), DeliverAt: time.Now().Add(time.Hour)}, loose)
	ok, _ := protocol.AppendMessage(nil, &protocol.Message{Subject: "s", ID: "ok", DeliverAt: time.Now().Add(time.Hour)}, loose)
	resp, err := tc.Call(context.Background(), dl.Addr().String(), protocol.CmdSend, protocol.AppendSendRequest(nil, 0, [][]byte{far, big, ok, []byte("junk")}))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := protocol.DecodeSendResponse(resp)
	want := []protocol.Status{protocol.StatusBeyondHorizon, protocol.StatusTooLarge, protocol.StatusOK}
	for i, w := range want {
		if st[i] != w {
			t.Fatalf("statuses %v, want %v…", st, want)
		}
	}
	if st[3] == protocol.StatusOK {
		t.Fatal("junk stored")
	}
	if _, err := tc.Call(context.Background(), dl.Addr().String(), protocol.CmdSend, []byte{1}); !errors.Is(err, protocol.ErrBadRequest) {
		t.Fatalf("malformed body: %v", err)
	}
	if n := dl.Stats().Pending; n != 1 {
		t.Fatalf("%d pending, want 1", n)
	}
}

// A realtime broker that is down when messages fall due: they wait and go
// out when it returns.
func TestDelay_WaitsForRealtime(t *testing.T) {
	rtDir := t.TempDir()
	rt := startRealtime(t, rtDir, "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	dl := startDelay(t, t.TempDir(), "127.0.0.1:0", rtAddr)
	tc, _ := transport.New(fastTransport, nil)
	defer tc.Close()
	var msgs [][]byte
	for i := range 20 {
		raw, _ := protocol.AppendMessage(nil, &protocol.Message{Subject: "late", ID: fmt.Sprintf("m%d", i), DeliverAt: time.Now().Add(time.Second)}, protocol.DefaultLimits)
		msgs = append(msgs, raw)
	}
	if _, err := tc.Call(context.Background(), dl.Addr().String(), protocol.CmdSend, protocol.AppendSendRequest(nil, 0, msgs)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // due while the broker is down
	startRealtime(t, rtDir, rtAddr)
	mu, got := subscribe(t, rtAddr, "late")
	testutil.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) < 20 {
			return fmt.Errorf("%d of 20 delivered", len(got))
		}
		return nil
	})
	testutil.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if n := dl.Stats().Pending; n != 0 {
			return fmt.Errorf("%d still pending", n)
		}
		return nil
	})
}

// A restart with messages pending: all are delivered once.
func TestDelay_RestartKeepsPending(t *testing.T) {
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	dir := t.TempDir()
	dl := startDelay(t, dir, "127.0.0.1:0", rt.Addr().String())
	res := route.NewStatic(route.Groups(rt.Addr().String()), route.Groups(dl.Addr().String()))
	p, _ := producer.New(producer.WithResolver(res), producer.WithTransportOptions(fastTransport))
	defer p.Close(context.Background())
	var ids []string
	for i := range 50 {
		m := &producer.Message{Subject: "restart", Body: []byte(fmt.Sprint(i)), DeliverAt: time.Now().Add(1500 * time.Millisecond)}
		if err := p.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	addr := dl.Addr().String()
	if err := dl.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	startDelay(t, dir, addr, rt.Addr().String())
	mu, got := subscribe(t, rt.Addr().String(), "restart")
	testutil.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if len(got[id]) == 0 {
				return fmt.Errorf("message %s not delivered", id)
			}
		}
		return nil
	})
	mu.Lock()
	for _, id := range ids {
		if len(got[id]) != 1 {
			t.Errorf("message %s delivered %d times", id, len(got[id]))
		}
	}
	mu.Unlock()
}

// A handler's RetryAfter goes through the delay server when the cluster has
// one: the message comes back after the chosen time, never before.
func TestDelay_ConsumerRetryAfter(t *testing.T) {
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	dl := startDelay(t, t.TempDir(), "127.0.0.1:0", rt.Addr().String())
	res := route.NewStatic(route.Groups(rt.Addr().String()), route.Groups(dl.Addr().String()))
	c, err := consumer.New(consumer.WithResolver(res), consumer.WithConsumerID("c1"), consumer.WithTransportOptions(fastTransport))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	type seen struct {
		attempts int
		at       time.Time
	}
	ch := make(chan seen, 4)
	if _, err := c.Subscribe("mail", "sender", func(ctx context.Context, m *consumer.Message) error {
		ch <- seen{m.Attempts, time.Now()}
		if m.Attempts == 0 {
			return consumer.RetryAfter(1500*time.Millisecond, errors.New("busy"))
		}
		return nil
	}, consumer.StartEarliest()); err != nil {
		t.Fatal(err)
	}
	p, _ := producer.New(producer.WithResolver(res), producer.WithTransportOptions(fastTransport))
	defer p.Close(context.Background())
	if err := p.Send(context.Background(), &producer.Message{Subject: "mail", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	first := <-ch
	select {
	case second := <-ch:
		if second.attempts != 1 || second.at.Sub(first.at) < 1500*time.Millisecond {
			t.Fatalf("retry came back after %v with attempts %d", second.at.Sub(first.at), second.attempts)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("retry never came back")
	}
	testutil.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if st := dl.Stats(); st.Dispatched == 0 {
			return fmt.Errorf("the retry did not go through the delay server (dispatched %d)", st.Dispatched)
		}
		return nil
	})
}

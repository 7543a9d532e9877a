package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"
)

// TestAckEachBroker: against a real broker, per-message acks from handlers
// that finish out of order (Concurrency 4) reach it in order: every message
// is delivered once and the broker never takes an ack as one above a lost
// ack (which would send the messages below it to the retry subject).
func TestAckEachBroker(t *testing.T) {
	const total = 3000
	o := realtime.NewOptions()
	o.Addr, o.HTTPAddr, o.DataDir, o.SegmentSize = "127.0.0.1:0", "", t.TempDir(), 8<<20
	o.RetryDelay = 10 * time.Millisecond // a retried message would come back at once
	b, err := realtime.New(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	addr := b.Addr().String()

	p, err := producer.New(producer.WithBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	for i := range total {
		if err := p.SendAsync(&producer.Message{Subject: "s", Body: []byte(fmt.Sprint(i))}, func(_ *producer.Message, err error) {
			if err != nil {
				t.Error(err)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	seen := map[string]int{}
	c, err := consumer.New(consumer.WithBrokers(addr), consumer.WithConsumerID("c1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe("s", "g", func(_ context.Context, m *consumer.Message) error {
		mu.Lock()
		seen[string(m.Body)]++
		mu.Unlock()
		return nil
	}, consumer.AckEach(), consumer.StartEarliest(), consumer.Concurrency(4), consumer.PullBatch(64), consumer.MaxUnacked(256)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages received", n, total)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for body, n := range seen {
		if n != 1 {
			t.Errorf("message %s delivered %d times", body, n)
		}
	}
	mu.Unlock()
	mfs, err := b.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "qmq_realtime_messages_lost_ack_retried_total" {
			continue
		}
		found = true
		if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 0 {
			t.Errorf("the broker took %v acks as lost and retried their messages", v)
		}
	}
	if !found {
		t.Fatal("no qmq_realtime_messages_lost_ack_retried_total metric")
	}
}

package producer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/scripts/localcluster"
)

// startExampleCluster starts a meta server, two realtime groups and a delay
// group in this process, as scripts/run-local.sh starts them, and returns
// the meta server's TCP address (run-local's is 127.0.0.1:20880).
func startExampleCluster() (meta string, stop func()) {
	c, err := localcluster.Start(localcluster.Options{})
	if err != nil {
		panic(err)
	}
	return c.MetaAddr(), func() { c.Close() }
}

// A producer and a consumer that find the brokers through the meta server:
// each takes the meta servers' TCP addresses in one option.
func Example_metaServer() {
	meta, stop := startExampleCluster() // "127.0.0.1:20880" with scripts/run-local.sh
	defer stop()
	ctx := context.Background()

	c, err := consumer.New(consumer.WithMetaServers(meta), consumer.WithConsumerID("billing-1"))
	if err != nil {
		panic(err)
	}
	defer c.Close(ctx)
	got := make(chan string, 1)
	// Subscribe before sending; StartEarliest makes a new group start at the
	// oldest message, so the first send is not missed.
	_, err = c.Subscribe("order.paid", "billing", func(ctx context.Context, m *consumer.Message) error {
		got <- string(m.Body)
		return nil
	}, consumer.StartEarliest())
	if err != nil {
		panic(err)
	}

	p, err := producer.New(producer.WithMetaServers(meta))
	if err != nil {
		panic(err)
	}
	defer p.Close(ctx)
	if err := p.Send(ctx, &producer.Message{Subject: "order.paid", Body: []byte("order 42")}); err != nil {
		panic(err)
	}
	fmt.Println(<-got)
	// Output: order 42
}

// A delayed message: DeliverAt sends it to a delay group, which hands it to
// the realtime brokers when it is due, never before. A message due further
// ahead than the delay group's horizon (731 days unless configured) is
// refused with ErrBeyondHorizon, whose text names the limit.
func Example_delayed() {
	meta, stop := startExampleCluster()
	defer stop()
	ctx := context.Background()

	c, err := consumer.New(consumer.WithMetaServers(meta), consumer.WithConsumerID("reminders-1"))
	if err != nil {
		panic(err)
	}
	defer c.Close(ctx)
	got := make(chan *consumer.Message, 1)
	_, err = c.Subscribe("order.reminder", "mailer", func(ctx context.Context, m *consumer.Message) error {
		got <- m
		return nil
	}, consumer.StartEarliest())
	if err != nil {
		panic(err)
	}

	p, err := producer.New(producer.WithMetaServers(meta))
	if err != nil {
		panic(err)
	}
	defer p.Close(ctx)
	due := time.Now().Add(time.Second)
	if err := p.Send(ctx, &producer.Message{Subject: "order.reminder", Body: []byte("pay order 42"), DeliverAt: due}); err != nil {
		panic(err)
	}
	m := <-got
	fmt.Printf("%s, on time: %v\n", m.Body, !time.Now().Before(due))

	err = p.Send(ctx, &producer.Message{Subject: "order.reminder", Body: []byte("in three years"), DeliverAt: time.Now().AddDate(3, 0, 0)})
	fmt.Println(errors.Is(err, producer.ErrBeyondHorizon), strings.Contains(err.Error(), "731 days"))
	// Output:
	// pay order 42, on time: true
	// true true
}

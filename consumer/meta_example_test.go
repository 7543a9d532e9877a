package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/scripts/localcluster"
)

// A consumer of a whole cluster (scripts/run-local.sh's, started here in
// process) found through the meta server: a handler that cannot handle a
// message now returns RetryAfter, and the message comes back through the
// delay server once that time has passed, never before.
func Example_retryAfterWithMetaServer() {
	cluster, err := localcluster.Start(localcluster.Options{})
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	meta := cluster.MetaAddr() // "127.0.0.1:20880" with scripts/run-local.sh
	ctx := context.Background()

	c, err := consumer.New(consumer.WithMetaServers(meta), consumer.WithConsumerID("mailer-1"))
	if err != nil {
		panic(err)
	}
	defer c.Close(ctx)
	type delivery struct {
		attempt int
		at      time.Time
	}
	got := make(chan delivery, 2)
	_, err = c.Subscribe("mail.send", "mailer", func(ctx context.Context, m *consumer.Message) error {
		got <- delivery{m.Attempts + 1, time.Now()}
		if m.Attempts == 0 {
			return consumer.RetryAfter(time.Second, errors.New("smtp busy")) // again in a second
		}
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
	if err := p.Send(ctx, &producer.Message{Subject: "mail.send", Body: []byte("welcome")}); err != nil {
		panic(err)
	}
	first, second := <-got, <-got
	// Due times are kept in milliseconds: allow the last one.
	fmt.Println("attempts", first.attempt, second.attempt, "a second apart:", second.at.Sub(first.at) >= time.Second-time.Millisecond)
	// Output: attempts 1 2 a second apart: true
}

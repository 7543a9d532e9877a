package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"
)

func startExampleBroker() (addr string, stop func()) {
	dir, _ := os.MkdirTemp("", "qmq-example-")
	o := realtime.NewOptions()
	o.Addr, o.HTTPAddr, o.DataDir, o.SegmentSize = "127.0.0.1:0", "", dir, 8<<20
	b, err := realtime.New(o, nil)
	if err != nil {
		panic(err)
	}
	if err := b.Start(); err != nil {
		panic(err)
	}
	return b.Addr().String(), func() { b.Close(context.Background()); os.RemoveAll(dir) }
}

func ExampleConsumer_Subscribe() {
	addr, stop := startExampleBroker()
	defer stop()

	c, err := consumer.New(consumer.WithBrokers(addr), consumer.WithConsumerID("billing-1"))
	if err != nil {
		panic(err)
	}
	got := make(chan string, 1)
	_, err = c.Subscribe("order.changed", "billing", func(ctx context.Context, m *consumer.Message) error {
		got <- string(m.Body)
		return nil // acks the message; an error would retry it later
	}, consumer.Concurrency(4), consumer.StartEarliest())
	if err != nil {
		panic(err)
	}

	p, _ := producer.New(producer.WithBrokers(addr))
	p.Send(context.Background(), &producer.Message{Subject: "order.changed", Body: []byte("order 42 paid")})
	p.Close(context.Background())

	fmt.Println(<-got)
	c.Close(context.Background()) // finishes running handlers and acks
	// Output: order 42 paid
}

func ExampleRetryAfter() {
	addr, stop := startExampleBroker()
	defer stop()
	c, _ := consumer.New(consumer.WithBrokers(addr), consumer.WithConsumerID("mailer-1"))
	defer c.Close(context.Background())
	done := make(chan int, 1)
	c.Subscribe("mail", "sender", func(ctx context.Context, m *consumer.Message) error {
		if m.Attempts == 0 {
			// The mail server is busy: try this message again in 200 ms.
			return consumer.RetryAfter(200*time.Millisecond, errors.New("smtp busy"))
		}
		done <- m.Attempts
		return nil
	}, consumer.StartEarliest())

	p, _ := producer.New(producer.WithBrokers(addr))
	p.Send(context.Background(), &producer.Message{Subject: "mail", Body: []byte("hello")})
	p.Close(context.Background())
	fmt.Println("delivered on attempt", <-done+1)
	// Output: delivered on attempt 2
}

func ExamplePuller_Pull() {
	addr, stop := startExampleBroker()
	defer stop()
	c, _ := consumer.New(consumer.WithBrokers(addr), consumer.WithConsumerID("batch-job"))
	defer c.Close(context.Background())
	pl, err := c.Puller("reports", "nightly", consumer.StartEarliest())
	if err != nil {
		panic(err)
	}
	p, _ := producer.New(producer.WithBrokers(addr))
	for i := range 3 {
		p.Send(context.Background(), &producer.Message{Subject: "reports", Body: []byte(fmt.Sprint("report ", i))})
	}
	p.Close(context.Background())

	seen := 0
	for seen < 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		msgs, err := pl.Pull(ctx, 10)
		cancel()
		if err != nil {
			panic(err)
		}
		for _, m := range msgs {
			m.Ack() // or m.Nack(err) to retry it later
			seen++
		}
	}
	fmt.Println("pulled", seen)
	// Output: pulled 3
}

// A consumer proving its identity with a client certificate (made by
// scripts/certs -client app:billing) instead of a secret; its servers are
// verified against the cluster's CA. Both files are re-read when they
// change, so certificates are renewed without a restart.
func Example_secure() {
	tlsCfg, err := tlsconfig.Client(tlsconfig.Files{
		CA:   "data/tls/ca.pem",
		Cert: "data/tls/app-billing.pem",
		Key:  "data/tls/app-billing-key.pem", // mode 0600
	}, "")
	if err != nil {
		log.Fatal(err)
	}
	meta, err := metaclient.New([]string{"127.0.0.1:20880"}, "billing-1", metaclient.WithTLS(tlsCfg))
	if err != nil {
		log.Fatal(err)
	}
	defer meta.Close()
	c, err := consumer.New(consumer.WithResolver(meta), consumer.WithConsumerID("billing-1"), consumer.WithTLS(tlsCfg))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	_, err = c.Subscribe("order.paid", "billing", func(ctx context.Context, m *consumer.Message) error {
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Or by secret: consumer.WithCredentials(auth.Credentials{Name: "billing", Secret: secret}),
	// WithCredentialsFile(path) or WithCredentialsFromEnv() ($QMQ_CREDENTIALS).
}

// Properties travel with a message: the producer sets them as
// []producer.Property, the handler reads []consumer.Property (the same
// type) or one by key.
func ExampleMessage_Property() {
	addr, stop := startExampleBroker()
	defer stop()
	c, _ := consumer.New(consumer.WithBrokers(addr), consumer.WithConsumerID("audit-1"))
	defer c.Close(context.Background())
	got := make(chan []consumer.Property, 1)
	c.Subscribe("order.changed", "audit", func(ctx context.Context, m *consumer.Message) error {
		if state, ok := m.Property("state"); ok && state == "paid" {
			got <- m.Properties
		}
		return nil
	}, consumer.StartEarliest())

	p, _ := producer.New(producer.WithBrokers(addr))
	p.Send(context.Background(), &producer.Message{Subject: "order.changed", Body: []byte("42"),
		Properties: []producer.Property{{Key: "order", Value: "42"}, {Key: "state", Value: "paid"}}})
	p.Close(context.Background())
	for _, pr := range <-got {
		fmt.Println(pr.Key, "=", pr.Value)
	}
	// Output:
	// order = 42
	// state = paid
}

// Command example sends a message through a QMQ-Go cluster and receives it:
// a realtime message and a delayed one, via the meta server. It is the
// example scripts/run-local.sh prints.
//
//	go run ./scripts/example --meta 127.0.0.1:20880
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/producer"
)

func main() {
	meta := flag.String("meta", "127.0.0.1:20880", "meta server TCP address")
	subject := flag.String("subject", "hello.world", "subject")
	delay := flag.Duration("delay", 2*time.Second, "delay of the second message")
	flag.Parse()
	if err := run(*meta, *subject, *delay); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

func run(meta, subject string, delay time.Duration) error {
	routes, err := metaclient.New([]string{meta}, "example")
	if err != nil {
		return err
	}
	defer routes.Close()
	c, err := consumer.New(consumer.WithResolver(routes), consumer.WithConsumerID("example"))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	got := make(chan *consumer.Message, 2)
	if _, err := c.Subscribe(subject, "example", func(ctx context.Context, m *consumer.Message) error {
		got <- m
		return nil
	}); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond) // a new group starts at the latest message: let it exist

	p, err := producer.New(producer.WithResolver(routes))
	if err != nil {
		return err
	}
	defer p.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := time.Now()
	if err := p.Send(ctx, &producer.Message{Subject: subject, Body: []byte("hello, now")}); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	if err := p.Send(ctx, &producer.Message{Subject: subject, Body: []byte("hello, later"), DeliverAt: now.Add(delay)}); err != nil {
		return fmt.Errorf("send delayed: %w", err)
	}
	fmt.Printf("sent 2 messages to %q (one due in %v)\n", subject, delay)
	for range 2 {
		select {
		case m := <-got:
			fmt.Printf("received %q after %v (broker group %s)\n", m.Body, time.Since(now).Round(time.Millisecond), m.BrokerGroup)
		case <-time.After(delay + 15*time.Second):
			return fmt.Errorf("no message received")
		}
	}
	return nil
}

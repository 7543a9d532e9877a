// Command example sends a message through a QMQ-Go cluster and receives it:
// a realtime message and a delayed one, via the meta server. It is the
// example scripts/run-local.sh prints.
//
//	go run ./scripts/example --meta 127.0.0.1:20880
//
// --meta defaults to $QMQ_META, then to run-local's 127.0.0.1:20880 (the meta
// server's TCP address; qmqctl's --meta-http is its HTTP one). The consumer
// subscribes before anything is sent and starts a new group at the earliest
// message, so nothing sent in between is missed.
//
// Against a secure cluster (QMQ_SECURE=1 scripts/run-local.sh prints the
// exact line): --tls-ca, and an identity by --credentials-file (or
// QMQ_CREDENTIALS) or by a client certificate (--tls-cert, --tls-key).
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/producer"
)

func main() {
	meta := flag.String("meta", cmp.Or(os.Getenv("QMQ_META"), "127.0.0.1:20880"), "meta server TCP address (env QMQ_META)")
	subject := flag.String("subject", "hello.world", "subject")
	delay := flag.Duration("delay", 2*time.Second, "delay of the second message")
	var files tlsconfig.Files
	files.AddFlags(flag.CommandLine, "tls-", "the example's")
	credsFile := flag.String("credentials-file", "", "file holding name:secret, mode 0600 (default: env QMQ_CREDENTIALS)")
	flag.Parse()
	if err := run(*meta, *subject, *delay, files, *credsFile); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

func run(meta, subject string, delay time.Duration, files tlsconfig.Files, credsFile string) error {
	var (
		mopts []metaclient.Option
		copts []consumer.Option
		popts []producer.Option
	)
	if !files.IsZero() {
		cfg, err := tlsconfig.Client(files, "")
		if err != nil {
			return err
		}
		mopts, copts, popts = append(mopts, metaclient.WithTLS(cfg)), append(copts, consumer.WithTLS(cfg)), append(popts, producer.WithTLS(cfg))
	}
	if credsFile != "" {
		mopts, copts, popts = append(mopts, metaclient.WithCredentialsFile(credsFile)),
			append(copts, consumer.WithCredentialsFile(credsFile)), append(popts, producer.WithCredentialsFile(credsFile))
	} else if os.Getenv("QMQ_CREDENTIALS") != "" {
		mopts, copts, popts = append(mopts, metaclient.WithCredentialsFromEnv()),
			append(copts, consumer.WithCredentialsFromEnv()), append(popts, producer.WithCredentialsFromEnv())
	}
	routes, err := metaclient.New([]string{meta}, "example", mopts...)
	if err != nil {
		return err
	}
	defer routes.Close()
	c, err := consumer.New(append(copts, consumer.WithResolver(routes), consumer.WithConsumerID("example"))...)
	if err != nil {
		return err
	}
	defer closeWithin(c.Close)
	got := make(chan *consumer.Message, 2)
	// A new group starts at the newest message unless StartEarliest: the
	// group may reach its brokers only after the sends below.
	if _, err := c.Subscribe(subject, "example", func(ctx context.Context, m *consumer.Message) error {
		got <- m
		return nil
	}, consumer.StartEarliest()); err != nil {
		return err
	}

	p, err := producer.New(append(popts, producer.WithResolver(routes))...)
	if err != nil {
		return err
	}
	defer closeWithin(p.Close)
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

// closeWithin closes a client, giving what it still holds 5 s.
func closeWithin(close func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = close(ctx)
}

package producer_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"
)

// startExampleBroker runs a broker on a free loopback port with its data in
// a temporary directory, as a test would.
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

func ExampleProducer_Send() {
	addr, stop := startExampleBroker()
	defer stop()

	// With a meta server, use WithResolver(metaclient...) instead.
	p, err := producer.New(producer.WithBrokers(addr))
	if err != nil {
		panic(err)
	}
	defer p.Close(context.Background())

	msg := &producer.Message{
		Subject:    "order.changed",
		Tags:       []string{"hotel"},
		Properties: []producer.Property{{Key: "order", Value: "42"}},
		Body:       []byte(`{"order":42,"state":"paid"}`),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Send returns once the broker has stored the message (fsync by default).
	if err := p.Send(ctx, msg); err != nil {
		panic(err)
	}
	fmt.Println("stored with an id of", len(msg.ID), "characters")
	// Output: stored with an id of 26 characters
}

func ExampleProducer_SendBatch() {
	addr, stop := startExampleBroker()
	defer stop()
	p, err := producer.New(producer.WithBrokers(addr))
	if err != nil {
		panic(err)
	}
	defer p.Close(context.Background())

	msgs := make([]*producer.Message, 100)
	for i := range msgs {
		msgs[i] = &producer.Message{Subject: "clicks", Body: []byte(fmt.Sprint(i))}
	}
	msgs[99].Subject = "not a subject!" // refused: the others are still stored
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// One request for the batch; nil when every message is stored.
	errs := p.SendBatch(ctx, msgs)
	stored := 0
	for _, err := range errs {
		if err == nil {
			stored++
		}
	}
	fmt.Println(stored, "stored;", errors.Is(errs[99], producer.ErrInvalid))
	// Output: 99 stored; true
}

func ExampleProducer_SendAsync() {
	addr, stop := startExampleBroker()
	defer stop()
	p, err := producer.New(producer.WithBrokers(addr))
	if err != nil {
		panic(err)
	}
	done := make(chan error, 100)
	for i := range 100 {
		msg := &producer.Message{Subject: "clicks", Body: []byte(fmt.Sprint(i))}
		// Batched with other queued messages; the callback reports the outcome.
		if err := p.SendAsync(msg, func(_ *producer.Message, err error) { done <- err }); err != nil {
			panic(err)
		}
	}
	failed := 0
	for range 100 {
		if <-done != nil {
			failed++
		}
	}
	p.Close(context.Background()) // flushes anything still queued
	fmt.Println("failed:", failed)
	// Output: failed: 0
}

// A producer of a cluster that runs TLS and requires an identity: the CA
// file verifies the servers, and the application's credentials come from
// the environment (QMQ_CREDENTIALS=orders:<secret>; WithCredentialsFile
// reads them from a file only its owner may read). The meta client, which
// finds the brokers, uses the same TLS config and identity.
func Example_secure() {
	tlsCfg, err := tlsconfig.Client(tlsconfig.Files{CA: "data/tls/ca.pem"}, "")
	if err != nil {
		log.Fatal(err) // the CA file is missing or holds no certificate
	}
	meta, err := metaclient.New([]string{"127.0.0.1:20880"}, "orders-service",
		metaclient.WithTLS(tlsCfg), metaclient.WithCredentialsFromEnv())
	if err != nil {
		log.Fatal(err)
	}
	defer meta.Close()
	p, err := producer.New(producer.WithResolver(meta), producer.WithTLS(tlsCfg), producer.WithCredentialsFromEnv())
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(context.Background())
	// A refused identity fails the send at once: errors.Is(err, protocol.ErrUnauthenticated).
	_ = p.Send(context.Background(), &producer.Message{Subject: "order.created", Body: []byte("order 42")})
}

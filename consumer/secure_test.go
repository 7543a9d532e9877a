package consumer_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/pkg/tlsconfig/tlstest"
	"github.com/qmq-go/qmq/pkg/transport"
	"github.com/qmq-go/qmq/producer"
)

func TestSecure_ReceiveOverTLSWithCredentials(t *testing.T) {
	addr, stop := startExampleBroker()
	defer stop()
	pk := tlstest.New(t)
	front := tlstest.StartFront(t, addr, pk.ServerConfig(), map[string]string{"billing": "s3cret"})
	tlsCfg := pk.ClientConfig(tlsconfig.Files{})
	t.Setenv(transport.CredentialsEnv, "billing:s3cret")

	c, err := consumer.New(consumer.WithBrokers(front.Addr), consumer.WithConsumerID("billing-1"),
		consumer.WithTLS(tlsCfg), consumer.WithCredentialsFromEnv())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	got := make(chan string, 1)
	if _, err := c.Subscribe("order.paid", "billing", func(_ context.Context, m *consumer.Message) error {
		got <- string(m.Body)
		return nil
	}, consumer.StartEarliest()); err != nil {
		t.Fatal(err)
	}
	p, err := producer.New(producer.WithBrokers(front.Addr), producer.WithTLS(tlsCfg),
		producer.WithCredentials(auth.Credentials{Name: "billing", Secret: "s3cret"}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Send(ctx, &producer.Message{Subject: "order.paid", Body: []byte("order 42")}); err != nil {
		t.Fatal(err)
	}
	p.Close(context.Background())
	select {
	case body := <-got:
		if body != "order 42" {
			t.Fatalf("got %q", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received over TLS")
	}
	if front.BySecret.Load() < 2 || front.Refused.Load() != 0 {
		t.Fatalf("front: %d by secret, %d refused", front.BySecret.Load(), front.Refused.Load())
	}
}

func TestSecure_OptionErrors(t *testing.T) {
	tr, err := transport.New(transport.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := consumer.New(consumer.WithBrokers("127.0.0.1:1"), consumer.WithTransport(tr),
		consumer.WithTLS(tlstest.New(t).ClientConfig(tlsconfig.Files{}))); err == nil {
		t.Fatal("a TLS config for a shared transport was ignored silently")
	}
	path := filepath.Join(t.TempDir(), "billing.cred")
	if err := os.WriteFile(path, []byte("billing:s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := consumer.New(consumer.WithBrokers("127.0.0.1:1"), consumer.WithCredentialsFile(path)); !errors.Is(err, auth.ErrInvalid) {
		t.Fatalf("credentials file readable by others: %v", err)
	}
}

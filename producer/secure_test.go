package producer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/pkg/tlsconfig/tlstest"
	"github.com/qmq-go/qmq/pkg/transport"
)

func TestSecure_TLSAndCredentials(t *testing.T) {
	b := startFakeBroker(t)
	pk := tlstest.New(t)
	front := tlstest.StartFront(t, b.addr(), pk.ServerConfig(), map[string]string{"orders": "s3cret"})
	tlsCfg := pk.ClientConfig(tlsconfig.Files{})
	send := func(p *Producer) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		msg := &Message{Subject: "order.created", Body: []byte("hello")}
		err := p.Send(ctx, msg)
		if err == nil && !b.has(msg.ID) {
			t.Fatal("sent, but the broker does not have it")
		}
		return err
	}
	credFile := filepath.Join(t.TempDir(), "orders.cred")
	if err := os.WriteFile(credFile, []byte("orders:s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(transport.CredentialsEnv, "orders:s3cret")
	for name, creds := range map[string]Option{
		"WithCredentials":        WithCredentials(auth.Credentials{Name: "orders", Secret: "s3cret"}),
		"WithCredentialsFile":    WithCredentialsFile(credFile),
		"WithCredentialsFromEnv": WithCredentialsFromEnv(),
	} {
		t.Run(name, func(t *testing.T) {
			before := front.BySecret.Load()
			if err := send(newProducer(t, WithBrokers(front.Addr), WithTLS(tlsCfg), creds)); err != nil {
				t.Fatal(err)
			}
			if front.BySecret.Load() != before+1 {
				t.Fatal("the connection did not authenticate by secret")
			}
		})
	}
	t.Run("client certificate", func(t *testing.T) {
		cert := pk.ClientConfig(pk.Client(auth.KindApp, "orders"))
		if err := send(newProducer(t, WithBrokers(front.Addr), WithTLS(cert))); err != nil {
			t.Fatal(err)
		}
		if front.ByCertificate.Load() != 1 {
			t.Fatal("the connection did not authenticate by certificate")
		}
	})
	t.Run("wrong secret fails the send at once", func(t *testing.T) {
		p := newProducer(t, WithBrokers(front.Addr), WithTLS(tlsCfg), WithCredentials(auth.Credentials{Name: "orders", Secret: "guess"}))
		start := time.Now()
		err := send(p)
		if !errors.Is(err, protocol.ErrUnauthenticated) || IsRetryable(err) {
			t.Fatalf("Send = %v, want unauthenticated, not retryable", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("the refusal took %v", d)
		}
	})
}

func TestSecure_OptionErrors(t *testing.T) {
	tr, err := transport.New(transport.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := New(WithBrokers("127.0.0.1:1"), WithTransport(tr), WithCredentials(auth.Credentials{Name: "a", Secret: "b"})); err == nil {
		t.Fatal("credentials for a shared transport were ignored silently")
	}
	if _, err := New(WithBrokers("127.0.0.1:1"), WithCredentialsFile(filepath.Join(t.TempDir(), "missing"))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing credentials file: %v", err)
	}
	t.Setenv(transport.CredentialsEnv, "")
	p, err := New(WithBrokers("127.0.0.1:1"), WithCredentialsFromEnv()) // unset: none
	if err != nil {
		t.Fatal(err)
	}
	p.Close(context.Background())
}

package gateway_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer/gateway"
	"github.com/qmq-go/qmq/pkg/exposure"
)

func TestOptions_Validate(t *testing.T) {
	for name, mod := range map[string]func(*gateway.Options){
		"no cluster":              func(o *gateway.Options) { o.Brokers = nil },
		"meta and brokers":        func(o *gateway.Options) { o.MetaServers = []string{"127.0.0.1:1"} },
		"tiny body limit":         func(o *gateway.Options) { o.MaxBodyBytes = 10 },
		"default wait past max":   func(o *gateway.Options) { o.DefaultWait = time.Hour },
		"in flight under batch":   func(o *gateway.Options) { o.MaxInFlight = o.MaxBatch - 1 },
		"unacked under batch":     func(o *gateway.Options) { o.MaxUnacked = o.PullBatch - 1 },
		"zero consumer timeout":   func(o *gateway.Options) { o.ConsumerTimeout = 0 },
		"certificate with no key": func(o *gateway.Options) { o.HTTPTLS.Cert = "x.pem" },
	} {
		o := gateway.NewOptions()
		o.Brokers = []string{"127.0.0.1:1"}
		mod(&o)
		if err := o.Validate(); !errors.Is(err, gateway.ErrInvalidOptions) && err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Like every QMQ-Go listener, a gateway on a non-loopback address without
// TLS refuses to start unless marked insecure.
func TestGateway_RefusesInsecureListener(t *testing.T) {
	o := gateway.NewOptions()
	o.Addr, o.Brokers = "0.0.0.0:0", []string{"127.0.0.1:1"}
	g, err := gateway.New(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); !errors.Is(err, exposure.ErrInsecureListener) {
		g.Close(context.Background())
		t.Fatalf("started on %s without TLS: %v", o.Addr, err)
	}
	g.Close(context.Background())
}

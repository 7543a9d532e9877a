package metaclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/pkg/tlsconfig/tlstest"
)

func TestSecure_LookupAndRegisterOverTLS(t *testing.T) {
	m := startFakeMeta(t)
	pk := tlstest.New(t)
	front := tlstest.StartFront(t, m.addr(), pk.ServerConfig(), map[string]string{"orders": "s3cret"})
	tlsCfg := pk.ClientConfig(tlsconfig.Files{})

	// An application by secret.
	c := newTestClient(t, []string{front.Addr}, WithTLS(tlsCfg), WithCredentials(auth.Credentials{Name: "orders", Secret: "s3cret"}))
	r, err := c.Lookup(context.Background(), protocol.ClientProducer, "orders", "")
	if err != nil || len(r.Groups) != 1 {
		t.Fatalf("lookup over TLS: %+v, %v", r, err)
	}
	if front.BySecret.Load() != 1 {
		t.Fatal("the lookup did not authenticate")
	}

	// A broker proving its group by certificate.
	b := Broker{Kind: protocol.KindRealtime, Role: protocol.RoleMaster, Group: "g1", Address: "127.0.0.1:5000",
		Report: func() (protocol.GroupState, protocol.BrokerLoad) {
			return protocol.GroupReadWrite, protocol.BrokerLoad{}
		}}
	reg, err := Register(context.Background(), []string{front.Addr}, b, WithTLS(pk.ClientConfig(pk.Client(auth.KindBroker, "g1"))),
		WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(context.Background())
	if front.ByCertificate.Load() != 1 {
		t.Fatal("the registration did not present its certificate")
	}

	// Wrong credentials: the lookup fails as unauthenticated.
	bad := newTestClient(t, []string{front.Addr}, WithTLS(tlsCfg), WithCredentials(auth.Credentials{Name: "orders", Secret: "guess"}))
	if _, err := bad.Lookup(context.Background(), protocol.ClientProducer, "orders", ""); !errors.Is(err, protocol.ErrUnauthenticated) {
		t.Fatalf("lookup with a wrong secret: %v", err)
	}
}

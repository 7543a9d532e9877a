package gateway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/qmq-go/qmq/consumer/gateway"
	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/devetcd"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/realtime"
)

// cluster is a whole QMQ-Go cluster in this process (a meta server on an
// embedded etcd, one realtime group, one delay group) and a gateway on it.
// The tests are an external package: the gateway itself imports no server.
type cluster struct {
	meta    *metaserver.Server
	gateway *gateway.Server
	url     string
}

func quietLogger(t *testing.T) *zap.Logger { return zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)) }

// startCluster starts the cluster; consumerTimeout is the realtime
// broker's (how soon a dead gateway's messages go back), mod adjusts the
// gateway's options.
func startCluster(t *testing.T, consumerTimeout time.Duration, mod func(*gateway.Options)) *cluster {
	t.Helper()
	ctx := context.Background()
	e, err := devetcd.Start(devetcd.Options{Dir: t.TempDir(), Fast: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	mo := metaserver.NewOptions()
	mo.Addr, mo.HTTPAddr, mo.EtcdEndpoints, mo.AdminToken, mo.MinGroups = "127.0.0.1:0", "127.0.0.1:0", e.Endpoints(), "t", 1
	ms, err := metaserver.New(mo, quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := ms.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close(ctx) })
	meta := []string{ms.Addr().String()}

	ro := realtime.NewOptions()
	ro.Group, ro.Addr, ro.HTTPAddr, ro.DataDir, ro.SegmentSize, ro.MetaServers = "rt1", "127.0.0.1:0", "", t.TempDir(), 8<<20, meta
	ro.ConsumerTimeout = consumerTimeout
	rt, err := realtime.New(ro, quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(ctx) })
	do := delay.NewOptions()
	do.Group, do.Addr, do.HTTPAddr, do.DataDir, do.MetaServers = "dl1", "127.0.0.1:0", "", t.TempDir(), meta
	dl, err := delay.New(do, nil, nil, quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := dl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dl.Close(ctx) })
	admin := api.NewClient(ms.HTTPAddr().String(), "t", 5*time.Second)
	testutil.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		gs, err := admin.Groups(ctx)
		if err != nil {
			return err
		}
		if len(gs) < 2 {
			return fmt.Errorf("%d groups registered", len(gs))
		}
		return nil
	})

	g := startGateway(t, meta, mod)
	return &cluster{meta: ms, gateway: g, url: g.URL()}
}

func startGateway(t *testing.T, meta []string, mod func(*gateway.Options)) *gateway.Server {
	t.Helper()
	o := gateway.NewOptions()
	o.Addr, o.MetaServers = "127.0.0.1:0", meta
	if mod != nil {
		mod(&o)
	}
	g, err := gateway.New(o, quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		g.Close(ctx)
	})
	return g
}

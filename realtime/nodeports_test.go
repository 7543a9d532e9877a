package realtime_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/realtime"
)

// A port the node picked for a port-0 address is taken by another listener
// before its broker binds it (freePort only probes): the node picks again
// and serves as its group's master.
func TestNode_PicksAgainWhenAPickedPortIsTaken(t *testing.T) {
	t.Parallel()
	meta, _ := startFailoverMeta(t, failoverTTL)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	o := realtime.NewOptions()
	o.Group, o.Addr, o.HTTPAddr, o.DataDir = "picks", "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	o.MetaServers, o.SegmentSize, o.MaxBody = []string{meta.Addr().String()}, replSegment, replMaxBody
	n, err := realtime.NewNode(o, zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)))
	if err != nil {
		t.Fatal(err)
	}
	var picks atomic.Int32
	realtime.SetNodePortPicker(n, func(addr string) (string, error) {
		if picks.Add(1) == 1 {
			return taken.Addr().String(), nil
		}
		return realtime.FreePort(addr)
	})
	if err := n.Start(); err != nil {
		t.Fatalf("start with a picked port taken: %v", err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	if got := n.Addr().String(); got == taken.Addr().String() {
		t.Fatalf("the node serves on the taken address %s", got)
	}
	if p := picks.Load(); p < 4 {
		t.Fatalf("%d ports picked, want the two addresses picked twice", p)
	}
	c := newClient(t)
	testutil.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		return rawSend(context.Background(), c, n.Addr().String(), "picks", "m")
	})
	if role := n.Role(); role != realtime.RoleMaster {
		t.Fatalf("role %q, want master", role)
	}
}

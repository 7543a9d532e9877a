package delay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/devetcd"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/producer"
	"github.com/qmq-go/qmq/realtime"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// With a meta server: the delay server registers itself and forwards
// through the routes the meta server gives; producers reach it through
// metaclient; operators see the delay group and its pending count.
func TestDelay_ThroughMetaServer(t *testing.T) {
	ms := startMetaServer(t, func(o *metaserver.Options) { o.AdminToken = "t" })
	meta := []string{ms.Addr().String()}

	ro := realtime.NewOptions()
	ro.Addr, ro.HTTPAddr, ro.DataDir, ro.SegmentSize, ro.MetaServers = "127.0.0.1:0", "", t.TempDir(), 8<<20, meta
	rt, err := realtime.New(ro, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	do := delay.NewOptions()
	do.Addr, do.HTTPAddr, do.DataDir, do.MetaServers = "127.0.0.1:0", "", t.TempDir(), meta
	dl, err := delay.New(do, nil, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := dl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dl.Close(context.Background()) })

	admin := api.NewClient(ms.HTTPAddr().String(), "t", 5*time.Second)
	testutil.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		gs, err := admin.Groups(context.Background())
		if err != nil {
			return err
		}
		if len(gs) < 2 {
			return fmt.Errorf("%d groups registered", len(gs))
		}
		return nil
	})
	mc, err := metaclient.New(meta, "test", metaclient.WithRefreshInterval(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	p, err := producer.New(producer.WithResolver(mc))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	for i := range 7 {
		m := &producer.Message{Subject: "later", Body: []byte(fmt.Sprint(i)), DeliverAt: time.Now().Add(time.Hour)}
		if err := p.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	if n := dl.Stats().Appended; n != 7 {
		t.Fatalf("delay server stored %d messages, want 7", n)
	}
	testutil.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		gs, err := admin.Groups(context.Background())
		if err != nil {
			return err
		}
		for _, g := range gs {
			if g.Kind == "delay" {
				if g.Load.Pending != 7 {
					return fmt.Errorf("delay group %s shows %d pending", g.Name, g.Load.Pending)
				}
				return nil
			}
		}
		return fmt.Errorf("no delay group listed")
	})

	// Lookup and trace through the meta server: a delay server answers by
	// id (with or without the subject) or by schedule key within its
	// subject, pending and then cancelled.
	keyed := &producer.Message{Subject: "later", Body: []byte("keyed"), DeliverAt: time.Now().Add(time.Hour)}
	producer.SetScheduleKey(keyed, "k-1")
	if err := p.Send(context.Background(), keyed); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	scheduled := func(l api.Lookup, err error, state string) {
		t.Helper()
		if err != nil || len(l.Messages) != 1 {
			t.Fatalf("lookup: %+v, %v", l, err)
		}
		m := l.Messages[0]
		if m.Kind != "scheduled" || m.ScheduleState != state || m.ID != keyed.ID || m.Subject != "later" || m.Body != "keyed" ||
			m.DeliverAt == nil || !m.DeliverAt.Equal(keyed.DeliverAt.Truncate(time.Millisecond).Add(time.Millisecond)) && !m.DeliverAt.Equal(keyed.DeliverAt.Truncate(time.Millisecond)) {
			t.Fatalf("scheduled copy %+v, want %s", m, state)
		}
	}
	l, err := admin.LookupID(ctx, keyed.ID, api.InSubject("later"))
	scheduled(l, err, "pending")
	l, err = admin.LookupKey(ctx, "k-1", api.InSubject("later"))
	scheduled(l, err, "pending")
	l, err = admin.LookupID(ctx, keyed.ID) // by id, no subject: every delay server looks
	scheduled(l, err, "pending")
	if _, err := admin.LookupKey(ctx, "k-1"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("a lookup by schedule key without its subject found a scheduled message: %v", err)
	}
	if err := p.Cancel(ctx, "later", "k-1"); err != nil {
		t.Fatal(err)
	}
	l, err = admin.LookupID(ctx, keyed.ID, api.InSubject("later"))
	scheduled(l, err, "cancelled")
	tr, err := admin.TraceID(ctx, keyed.ID, api.InSubject("later"))
	if err != nil || len(tr.Events) != 2 || tr.Events[0].Event != "sent" || tr.Events[1].Event != "scheduled" ||
		!strings.Contains(tr.Events[1].Detail, "cancelled") {
		t.Fatalf("trace %+v, %v", tr, err)
	}
}

// startMetaServer starts a meta server on 127.0.0.1:0 over an embedded etcd
// in a temporary directory, with mod applied to its options; both stop
// when the test ends.
func startMetaServer(t *testing.T, mod func(*metaserver.Options)) *metaserver.Server {
	t.Helper()
	e, err := devetcd.Start(devetcd.Options{Dir: t.TempDir(), Fast: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	mo := metaserver.NewOptions()
	mo.Addr, mo.HTTPAddr, mo.EtcdEndpoints = "127.0.0.1:0", "127.0.0.1:0", e.Endpoints()
	if mod != nil {
		mod(&mo)
	}
	ms, err := metaserver.New(mo, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatal(err)
	}
	if err := ms.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close(context.Background()) })
	return ms
}

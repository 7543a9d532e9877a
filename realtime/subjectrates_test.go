package realtime_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/realtime"
)

// A subject's in-rate and its consumer groups' out-rates reach the meta
// server's subject page from a real broker's heartbeat reports, and fall
// back to 0 once the traffic stops.
func TestSubjectRates_OnTheSubjectPage(t *testing.T) {
	t.Parallel()
	meta, _ := startFailoverMeta(t, 5*time.Second)
	metaAddr := meta.Addr().String()
	o := realtime.NewOptions()
	o.Group, o.Addr, o.HTTPAddr, o.DataDir = "rates", "127.0.0.1:0", "", t.TempDir()
	o.MetaServers, o.Role, o.HeartbeatInterval = []string{metaAddr}, realtime.RoleMaster, 200*time.Millisecond
	b, err := realtime.New(o, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	addr := b.Addr().String()
	ctx := context.Background()

	// A producer's lookup routes the subject to the group.
	mc, err := metaclient.New([]string{metaAddr}, "rates-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mc.Close() })
	testutil.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		r, err := mc.Lookup(ctx, protocol.ClientProducer, "rated", "")
		if err == nil && len(r.Writable()) == 0 {
			err = fmt.Errorf("no writable group in %+v", r)
		}
		mc.Refresh(protocol.ClientProducer, "rated", "")
		return err
	})

	c := newClient(t)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			_ = rawSend(ctx, c, addr, "rated", fmt.Sprintf("r-%d", i))
		}
	}()
	stopSending := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	}
	t.Cleanup(stopSending)
	col := newCollector()
	cons, err := consumer.New(consumer.WithBrokers(addr), consumer.WithConsumerID("rates"),
		consumer.WithTransportOptions(fastTransport), consumer.WithLogger(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cons.Close(context.Background()) })
	if _, err := cons.Subscribe("rated", "g", col.handler, consumer.StartEarliest()); err != nil {
		t.Fatal(err)
	}

	admin := api.NewClient(meta.HTTPAddr().String(), "t", 5*time.Second)
	rates := func() (in, out, outPerBroker uint64, err error) {
		s, err := admin.Subject(ctx, "rated")
		if err != nil {
			return 0, 0, 0, err
		}
		if len(s.Errors) > 0 {
			return 0, 0, 0, fmt.Errorf("broker errors: %+v", s.Errors)
		}
		for _, g := range s.Groups {
			if g.Group == "g" {
				for _, p := range g.PerBroker {
					outPerBroker += p.OutPerSec
				}
				return s.InPerSec, g.OutPerSec, outPerBroker, nil
			}
		}
		return s.InPerSec, 0, 0, nil
	}
	testutil.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		in, out, perBroker, err := rates()
		if err == nil && (in == 0 || out == 0 || perBroker != out) {
			err = fmt.Errorf("in %d msg/s, group out %d msg/s (per broker %d), want both above 0", in, out, perBroker)
		}
		return err
	})
	// A sender every 2 ms cannot store more than 500 a second.
	if in, _, _, err := rates(); err != nil || in > 600 {
		t.Fatalf("in-rate %d msg/s from one sender every 2 ms (%v)", in, err)
	}
	stopSending()
	testutil.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		in, out, _, err := rates()
		if err == nil && (in != 0 || out != 0) {
			err = fmt.Errorf("in %d msg/s, out %d msg/s after the sends stopped, want 0", in, out)
		}
		return err
	})
}

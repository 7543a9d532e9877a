package metaserver

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/producer"
)

// TestFailover_ProducerMovesOffReadonlyAndDeadGroups drives the real
// producer, resolving routes through metaclient against a meta server,
// with steady load over three (fake) broker groups. One group is marked
// readonly by an admin, one reports itself readonly in its answers, and one
// dies without a goodbye; the application must see no failed send, and
// traffic must leave each group. (With the realtime broker, the same test
// belongs in an end-to-end suite; this one pins the meta side.)
func TestFailover_ProducerMovesOffReadonlyAndDeadGroups(t *testing.T) {
	// Not parallel: its load would disturb the timing other tests measure.
	if testing.Short() {
		t.Skip("long steady-load test; -short covers the same ground with real brokers (TestE2E_SIGKILLedBrokerUnderLoad, TestE2E_AdminAgainstRealBrokers) and TestMetaclient_ProducerRoutesFollowReadonlyAndDeadGroups")
	}
	const ttl = 2 * time.Second
	s := startServer(t, startEtcd(t), func(o *Options) { o.BrokerTTL = ttl; o.MinGroups = 4 })
	ctx := context.Background()
	brokers := map[string]*fakeBroker{}
	for _, g := range []string{"g1", "g2", "g3", "g4"} {
		brokers[g] = startFakeBroker(t, g)
	}
	// g1, g2, g4 heartbeat through metaclient; g3 through a loop the test
	// stops without a goodbye when it "kills" g3.
	for _, g := range []string{"g1", "g2", "g4"} {
		r, err := metaclient.Register(ctx, []string{s.Addr().String()}, metaclient.Broker{
			Kind: protocol.KindRealtime, Role: protocol.RoleMaster, Group: g, Address: brokers[g].addr(),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close(ctx) })
	}
	c := newClient(t)
	g3Stop, g3Done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(g3Done)
		req := master("g3", brokers["g3"].addr())
		for {
			if resp, err := c.register(s, req); err == nil {
				req.LeaseID = resp.LeaseID
			}
			select {
			case <-g3Stop:
				return
			case <-time.After(ttl / 3):
			}
		}
	}()
	var g3Once sync.Once
	stopG3 := func() { g3Once.Do(func() { close(g3Stop); <-g3Done }) }
	t.Cleanup(stopG3)
	eventually(t, 5*time.Second, "four groups", func() bool { return len(s.groups()) == 4 })

	mc, err := metaclient.New([]string{s.Addr().String()}, "producer-1", metaclient.WithRefreshInterval(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	p, err := producer.New(producer.WithResolver(mc), producer.WithSendTimeout(20*time.Second), producer.WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)

	var sent, failed atomic.Int64
	var firstErr atomic.Pointer[error]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				err := p.Send(ctx, &producer.Message{Subject: "orders", ID: fmt.Sprintf("m-%d-%d", w, i), Body: []byte("x")})
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				sent.Add(1)
			}
		}()
	}
	stopLoad := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer stopLoad()

	// quiet waits until group g takes no new message for a while and
	// returns how long that took from since.
	quiet := func(g string, since time.Time, within time.Duration) time.Duration {
		t.Helper()
		b := brokers[g]
		var last int64 = -1
		var stableAt time.Time
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			n := b.sent.Load()
			if n != last {
				last, stableAt = n, time.Now()
			} else if time.Since(stableAt) > 500*time.Millisecond {
				return stableAt.Sub(since)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("group %s still takes messages %v after the change", g, within)
		return 0
	}
	eventually(t, 10*time.Second, "traffic on every group", func() bool {
		for _, b := range brokers {
			if b.sent.Load() < 20 {
				return false
			}
		}
		return true
	})

	// 1. An admin marks g1 readonly: producers leave it on their next route
	// refresh.
	marked := time.Now()
	if _, err := admin(s, testToken).MarkReadonly(ctx, "g1", ""); err != nil {
		t.Fatal(err)
	}
	t.Logf("admin-readonly g1 quiet %v after the mark (refresh interval 500ms)", quiet("g1", marked, 5*time.Second))

	// 2. g2 answers "readonly" itself: the producer retries those messages
	// elsewhere and stops using g2.
	brokers["g2"].readonly.Store(true)
	selfRO := time.Now()
	t.Logf("self-readonly g2 quiet %v after it turned readonly", quiet("g2", selfRO, 5*time.Second))

	// 3. g3 dies: its server goes away and its heartbeats stop.
	killed := time.Now()
	_ = brokers["g3"].srv.Close(ctx)
	stopG3()
	eventually(t, ttl+3*time.Second, "the producer's route to mark g3 unavailable", func() bool {
		r, err := mc.Lookup(ctx, protocol.ClientProducer, "orders", "")
		return err == nil && groupStateIn(r, "g3") == protocol.GroupUnavailable
	})
	t.Logf("dead g3 unavailable in the producer's route %v after the kill (TTL %v)", time.Since(killed), ttl)
	if d := time.Since(killed); d > ttl+2*time.Second {
		t.Fatalf("failover took %v, over TTL + 2s", d)
	}

	before := brokers["g4"].sent.Load()
	eventually(t, 15*time.Second, "traffic to go on through g4", func() bool { return brokers["g4"].sent.Load() > before+20 })
	stopLoad()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d sends failed (of %d); first: %v", n, sent.Load()+n, *firstErr.Load())
	}
	t.Logf("%d sends, none failed", sent.Load())
}

func groupStateIn(r metaclient.Route, group string) protocol.GroupState {
	for _, g := range r.Groups {
		if g.Group == group {
			return g.State
		}
	}
	return 0
}

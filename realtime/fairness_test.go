package realtime_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
)

// A group of 64 consumers flooding pulls beside a group of 2: the small
// group is not starved. Both groups read the same backlog; the small group
// must get through its share while the flood goes on, at no less than a
// quarter of the pace it had alone (the bench suite `fairness` holds the
// real figure on a quiet machine; this guards against starvation).
func TestTiming_SmallGroupNotStarvedByFlood(t *testing.T) {
	if raceEnabled {
		t.Skip("timing test: the race detector distorts it (scripts/test.sh runs TestTiming tests in an un-raced pass)")
	}
	b := startBroker(t, t.TempDir())
	p := newProducer(t, b.addr())
	sendN(t, p, "fair", 20000, nil)

	rate := func(group string, n int) (float64, func()) {
		var handled atomic.Int64
		var cs []*consumer.Consumer
		for i := range n {
			c, err := consumer.New(consumer.WithBrokers(b.addr()), consumer.WithConsumerID(fmt.Sprintf("%s-%d", group, i)),
				consumer.WithTransportOptions(fastTransport))
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
			if _, err := c.Subscribe("fair", group, func(ctx context.Context, m *consumer.Message) error {
				handled.Add(1)
				return nil
			}, consumer.StartEarliest(), consumer.PullBatch(32), consumer.MaxUnacked(64)); err != nil {
				t.Fatal(err)
			}
		}
		stop := func() {
			for _, c := range cs {
				c.Close(context.Background())
			}
		}
		if group == "flood" {
			return 0, stop
		}
		start := time.Now()
		for handled.Load() < 3000 && time.Since(start) < 20*time.Second {
			time.Sleep(5 * time.Millisecond)
		}
		r := float64(handled.Load()) / time.Since(start).Seconds()
		stop()
		return r, nil
	}
	alone, _ := rate("small-alone", 2)
	_, stopFlood := rate("flood", 64)
	defer stopFlood()
	time.Sleep(300 * time.Millisecond)
	flooded, _ := rate("small-flooded", 2)
	t.Logf("small group alone %.0f msg/s, beside a 64-consumer flood %.0f msg/s (%.2f)", alone, flooded, flooded/alone)
	if flooded < alone/4 {
		t.Fatalf("small group starved: %.0f msg/s beside the flood, %.0f alone", flooded, alone)
	}
}

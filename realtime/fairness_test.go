package realtime_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/realtime"
)

// A group of 64 consumers flooding pulls beside a group of 2: the small
// group is not starved. Both groups read the same backlog; the small group
// must get through its share while the flood goes on, at no less than a
// quarter of the pace it had alone (the bench suite `fairness` holds the
// real figure on a quiet machine; this guards against starvation). It
// counts 50,000 messages of a 100,000 backlog (50–250 ms): counting
// 10,000 of 20,000 (10–50 ms), one scheduling hiccup of the test process
// swung the ratio from 0.14 to 0.97, and it fell under the quarter in ~1
// run of 10 before and after the changes of 2026-12-01 alike.
func TestTiming_SmallGroupNotStarvedByFlood(t *testing.T) {
	if raceEnabled {
		t.Skip("timing test: the race detector distorts it (scripts/test.sh runs TestTiming tests in an un-raced pass)")
	}
	b := startBroker(t, t.TempDir())
	p := newProducer(t, b.addr())

	rate := func(group string, n int) (float64, func()) {
		// The rate of 50,000 messages from the group's first delivery,
		// timed by the handler itself, not from the subscribe: a new
		// group's subscribe and first pull, or a polling interval, would
		// swamp the measurement.
		handled, stop := startFairGroup(t, b.addr(), group, n, 1, 50_001)
		if strings.HasPrefix(group, "flood") {
			return 0, stop
		}
		for wait := time.Now(); handled.at[1].Load() == 0; time.Sleep(5 * time.Millisecond) {
			if time.Since(wait) > 20*time.Second {
				t.Fatalf("group %s handled %d messages in 20 s", group, handled.Load())
			}
		}
		stop()
		return 50_000 / time.Duration(handled.at[1].Load()-handled.at[0].Load()).Seconds(), nil
	}
	// Up to three tries, each with new groups over a new backlog: on this
	// shared 2-core machine one try's rates swing with the host (the small
	// group alone at 0.35–0.67M msg/s in one hour), and a starved group
	// fails all three.
	var alone, flooded float64
	for try := range 3 {
		sendN(t, p, "fair", 100_000, nil)
		alone, _ = rate(fmt.Sprintf("small-alone-%d", try), 2)
		_, stopFlood := rate(fmt.Sprintf("flood-%d", try), 64)
		time.Sleep(300 * time.Millisecond)
		flooded, _ = rate(fmt.Sprintf("small-flooded-%d", try), 2)
		stopFlood()
		t.Logf("try %d: small group alone %.0f msg/s, beside a 64-consumer flood %.0f msg/s (%.2f)", try, alone, flooded, flooded/alone)
		if flooded >= alone/4 {
			return
		}
	}
	t.Fatalf("small group starved: %.0f msg/s beside the flood, %.0f alone", flooded, alone)
}

// TestTiming_SmallGroupNotStarvedByFlood above starts its flood on a backlog
// of 20,000 messages, which 64 consumers drain within its 300 ms wait, so it
// mostly measures the small group beside an idle group. This test keeps the
// flood under way while the small group is measured (a backlog it cannot
// drain, checked) and counts from each group's first delivery, for
// fairMeasure (four of the fair share's 100 ms windows). It used to count
// 3,000 messages: 10–30 ms once, 3–30 ms on a faster host, all inside the
// first window, before the fair share (fairshare.go) had held the flood
// at all, and it failed 7 and 9 runs of 10 (the small group at 0.09–0.25
// of its rate alone, both with and without the inline acks). Counting for
// 400 ms it passed 8 of 8 runs at 0.34–0.43, and 6 of 6 at 0.34–0.42 with
// a busy loop on a third thread, so it runs in the gate (2 s).
// fairMeasure is how long TestTiming_SmallGroupBesideALiveFlood counts
// each of its small groups.
const fairMeasure = 400 * time.Millisecond

func TestTiming_SmallGroupBesideALiveFlood(t *testing.T) {
	if raceEnabled {
		t.Skip("timing test: the race detector distorts it (scripts/test.sh runs TestTiming tests in an un-raced pass)")
	}
	b := startBroker(t, t.TempDir())
	p := newProducer(t, b.addr())
	// A backlog the flood cannot drain while the small group is measured
	// (checked below), so it floods the whole time.
	const backlog = 1_000_000
	sendN(t, p, "fair", backlog, nil)

	var floodHandled *fairCount
	rate := func(group string, n int) (float64, func()) {
		handled, stop := startFairGroup(t, b.addr(), group, n)
		if group == "flood" {
			floodHandled = handled
			return 0, stop
		}
		// Count from the first delivery, so that connecting and
		// subscribing (noisy on a busy machine) are not part of the rate.
		for wait := time.Now(); handled.Load() == 0 && time.Since(wait) < 20*time.Second; {
			time.Sleep(time.Millisecond)
		}
		// Four of the fair share's 100 ms windows: it judges shares over a
		// window, so a shorter measure (3,000 messages, 3–30 ms) saw the
		// flood before the broker had held it at all.
		start, first := time.Now(), handled.Load()
		for time.Since(start) < fairMeasure {
			time.Sleep(5 * time.Millisecond)
		}
		r := float64(handled.Load()-first) / time.Since(start).Seconds()
		stop()
		return r, nil
	}
	alone, _ := rate("small-alone", 2)
	_, stopFlood := rate("flood", 64)
	defer stopFlood()
	for wait := time.Now(); floodHandled.Load() < 1000 && time.Since(wait) < 20*time.Second; {
		time.Sleep(time.Millisecond) // the flood is under way
	}
	flooded, _ := rate("small-flooded", 2)
	drained := floodHandled.Load()
	t.Logf("small group alone %.0f msg/s, beside a 64-consumer flood %.0f msg/s (%.2f); the flood took %d of %d", alone, flooded, flooded/alone, drained, backlog)
	if drained >= backlog {
		t.Fatalf("the flood drained the whole backlog while the small group was measured: the test measured no flood")
	}
	if flooded < alone/4 {
		t.Fatalf("small group starved: %.0f msg/s beside the flood, %.0f alone", flooded, alone)
	}
}

// Fair share (fairshare.go): while a group of 16 consumers and a group of 1
// drain the same backlog, the broker holds the big group's pulls so that it
// takes no more messages than the small one, not sixteen times as many. It
// pays for its holds (HoldCharge, 64 messages a held pull), so with pulls
// of 32 it takes about (32/(32+64))×1.1 ≈ 0.37 of the small group's
// messages once every pull of it is held (measured 0.39–0.41), and never
// much less: the charge is bounded. Busy is 0 so that shares are enforced
// however idle this machine's broker is; the gate itself is unit-tested.
func TestTiming_FairShareHoldsTheFlood(t *testing.T) {
	if raceEnabled {
		t.Skip("timing test: the race detector distorts it (scripts/test.sh runs TestTiming tests in an un-raced pass)")
	}
	ratio, held := floodShare(t, func(o *realtime.Options) { o.FairShare.Busy = 0 })
	t.Logf("the flood took %.2f× the small group's messages; %v pulls held", ratio, held)
	if held == 0 {
		t.Fatal("no pull of the flood was held")
	}
	if ratio > 2.5 || ratio < 0.2 {
		t.Fatalf("the flood took %.2f× the small group's messages (want about 0.4×, between 0.2× and 2.5×)", ratio)
	}
}

// floodShare drains a backlog with a group of 16 consumers beside a group
// of 1 and returns how many times the small group's messages the flood took
// while both were draining, and how many pulls the broker held.
func floodShare(t *testing.T, mutate func(*realtime.Options)) (float64, float64) {
	b := startBroker(t, t.TempDir(), mutate)
	p := newProducer(t, b.addr())
	const backlog = 60000
	sendN(t, p, "share", backlog, nil)
	group := func(name string, n int) *atomic.Int64 {
		var handled atomic.Int64
		for i := range n {
			c := newConsumer(t, fmt.Sprintf("%s-%d", name, i), b.addr())
			if _, err := c.Subscribe("share", name, func(ctx context.Context, m *consumer.Message) error {
				handled.Add(1)
				return nil
			}, consumer.StartEarliest(), consumer.PullBatch(32), consumer.MaxUnacked(64)); err != nil {
				t.Fatal(err)
			}
		}
		return &handled
	}
	flood := group("flood", 16)
	small := group("small", 1)
	for small.Load() == 0 || flood.Load() == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	// Both drain from here until the small group has 10,000 or the flood
	// is close to the end of the backlog.
	f0, s0 := flood.Load(), small.Load()
	start := time.Now()
	for small.Load()-s0 < 10000 && flood.Load() < backlog-5000 && time.Since(start) < 20*time.Second {
		time.Sleep(time.Millisecond)
	}
	f, s := flood.Load()-f0, small.Load()-s0
	t.Logf("in %v: the flood %d messages, the small group %d", time.Since(start), f, s)
	if s == 0 {
		t.Fatalf("the small group got nothing beside the flood in %v (the flood %d)", time.Since(start), f)
	}
	return float64(f) / float64(s), counterValue(t, b.Registry(), "qmq_realtime_pulls_held_total")
}

// counterValue sums the counter name's series in reg.
func counterValue(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v
}

// startFairGroup starts n consumers of group on subject "fair" from its
// earliest message (batches of 32, at most 64 un-acked each) and returns the
// count of messages they handled (noting when it reached marks, at most
// two) and a function that closes them.
func startFairGroup(t *testing.T, addr, group string, n int, marks ...int64) (*fairCount, func()) {
	t.Helper()
	if len(marks) > len(fairCount{}.marks) {
		t.Fatalf("%d marks", len(marks))
	}
	handled := new(fairCount)
	copy(handled.marks[:], marks)
	var cs []*consumer.Consumer
	for i := range n {
		c, err := consumer.New(consumer.WithBrokers(addr), consumer.WithConsumerID(fmt.Sprintf("%s-%d", group, i)),
			consumer.WithTransportOptions(fastTransport))
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
		if _, err := c.Subscribe("fair", group, func(ctx context.Context, m *consumer.Message) error {
			handled.add()
			return nil
		}, consumer.StartEarliest(), consumer.PullBatch(32), consumer.MaxUnacked(64)); err != nil {
			t.Fatal(err)
		}
	}
	return handled, func() {
		for _, c := range cs {
			c.Close(context.Background())
		}
	}
}

// fairCount counts the messages a group handled and notes when the count
// reached its marks (0: no mark).
type fairCount struct {
	n     atomic.Int64
	marks [2]int64
	at    [2]atomic.Int64 // Unix nanoseconds when n reached marks[i]
}

// add counts one message.
func (c *fairCount) add() {
	k := c.n.Add(1)
	for i, m := range c.marks {
		if k == m {
			c.at[i].Store(time.Now().UnixNano())
		}
	}
}

// Load returns how many messages the group handled.
func (c *fairCount) Load() int64 { return c.n.Load() }

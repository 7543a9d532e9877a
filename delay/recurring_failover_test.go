package delay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/producer"
)

// Recurring schedules across a failover to a slave whose copy lags: the
// slave stops copying, the master goes on firing for a while, then the
// slave's copy is opened as the master. It fires again the templates whose
// later firing it never saw; their occurrences carry the same ids, so each
// occurrence is delivered once (the realtime broker drops the copies), none
// early, and every schedule goes on and stops when deleted.
func TestRecurring_FailoverNeverTwice(t *testing.T) {
	t.Parallel()
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	mu, got := subscribe(t, rtAddr, "beats")
	mo := delay.NewOptions()
	mo.Addr, mo.HTTPAddr, mo.DataDir, mo.Realtime = testutil.ReusableAddr(t), "", t.TempDir(), []string{rtAddr}
	mo.WaitSlave = true
	m := startDelayWith(t, mo)
	slaveDir := t.TempDir()
	sl := startDelayWith(t, slaveOptions(t, slaveDir, mo.Addr, rtAddr))
	p, err := producer.New(producer.WithResolver(route.NewStatic(route.Groups(rtAddr), route.Groups(mo.Addr))),
		producer.WithTransportOptions(fastTransport), producer.WithSendTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx := context.Background()
	const schedules = 5
	for i := range schedules {
		if err := p.CreateSchedule(ctx, producer.Schedule{Name: fmt.Sprint("beat-", i), Subject: "beats", Body: []byte("beat"), Cron: "@every 1s"}); err != nil {
			t.Fatal(err)
		}
	}
	// Occurrences per schedule (an occurrence's id is "<template id>.<ms>").
	perSchedule := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		n := map[string]int{}
		for id := range got {
			n[id[:strings.LastIndexByte(id, '.')]]++
		}
		return n
	}
	atLeast := func(want int, what string) {
		testutil.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
			n := perSchedule()
			if len(n) < schedules {
				return fmt.Errorf("%s: %d schedules delivered so far", what, len(n))
			}
			for s, k := range n {
				if k < want {
					return fmt.Errorf("%s: schedule %s has %d occurrences, want %d", what, s, k, want)
				}
			}
			return nil
		})
	}
	atLeast(2, "before the failover")

	// The slave stops copying; the master fires two more rounds it never
	// sees, then closes, and the slave's copy opens as the master.
	if err := sl.Close(ctx); err != nil {
		t.Fatal(err)
	}
	before := perSchedule()
	testutil.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		for s, k := range perSchedule() {
			if k < before[s]+2 {
				return fmt.Errorf("schedule %s: %d occurrences, want %d", s, k, before[s]+2)
			}
		}
		return nil
	})
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	po := delay.NewOptions()
	po.Addr, po.HTTPAddr, po.DataDir, po.Realtime = mo.Addr, "", slaveDir, []string{rtAddr}
	startDelayWith(t, po)
	after := perSchedule()
	testutil.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		for s, k := range perSchedule() {
			if k < after[s]+2 {
				return fmt.Errorf("after the failover: schedule %s has %d occurrences, want %d", s, k, after[s]+2)
			}
		}
		return nil
	})
	for i := range schedules {
		if err := p.DeleteSchedule(ctx, "beats", fmt.Sprint("beat-", i)); err != nil {
			t.Fatalf("delete beat-%d on the promoted master: %v", i, err)
		}
	}
	time.Sleep(300 * time.Millisecond) // an occurrence in flight at the delete may still land
	n := perSchedule()
	time.Sleep(2500 * time.Millisecond)
	for s, k := range perSchedule() {
		if k != n[s] {
			t.Fatalf("schedule %s went on after its delete: %d then %d occurrences", s, n[s], k)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, rs := range got {
		if len(rs) != 1 {
			t.Fatalf("occurrence %s delivered %d times", id, len(rs))
		}
		if rs[0].at.Before(rs[0].deliverAt) {
			t.Fatalf("occurrence %s delivered %v early", id, rs[0].deliverAt.Sub(rs[0].at))
		}
	}
}

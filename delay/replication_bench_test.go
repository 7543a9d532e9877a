package delay_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/producer"
	"go.uber.org/zap"
)

// TestReplication_WaitSlaveCost measures, side by side in one run, the
// send rate of a delay master alone, with a slave copying, and with
// --wait-slave (the reply waits for the slave's fdatasync): three
// alternating rounds of 200,000 messages of 64 bytes, due in an hour,
// pipelined through one producer. Everything shares this machine's cores
// and disk. QMQ_DELAY_BENCH=1 runs it; it prints metric lines.
func TestReplication_WaitSlaveCost(t *testing.T) {
	if os.Getenv("QMQ_DELAY_BENCH") != "1" {
		t.Skip("a measurement: QMQ_DELAY_BENCH=1")
	}
	const n = 200000
	rt := startRealtime(t, t.TempDir(), "127.0.0.1:0")
	rtAddr := rt.Addr().String()
	run := func(mode string) float64 {
		mo := delay.NewOptions()
		mo.Addr, mo.HTTPAddr, mo.DataDir, mo.Realtime = "127.0.0.1:0", "", t.TempDir(), []string{rtAddr}
		mo.WaitSlave = mode == "wait-slave"
		m, err := delay.New(mo, nil, nil, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
		defer m.Close(context.Background())
		if mode != "alone" {
			so := slaveOptions(t, t.TempDir(), m.Addr().String(), rtAddr)
			sl, err := delay.New(so, nil, nil, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			if err := sl.Start(); err != nil {
				t.Fatal(err)
			}
			defer sl.Close(context.Background())
			testutil.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
				if m.Replication().LagBytes != 0 || sl.Replication().Role != delay.RoleSlave {
					return fmt.Errorf("slave not connected")
				}
				return nil
			})
		}
		p, err := producer.New(producer.WithResolver(route.NewStatic(route.Groups(rtAddr), route.Groups(m.Addr().String()))),
			producer.WithTransportOptions(fastTransport), producer.WithSendTimeout(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(context.Background())
		body := make([]byte, 64)
		due := time.Now().Add(time.Hour)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		start := time.Now()
		for range n {
			wg.Add(1)
			if err := p.SendAsync(&producer.Message{Subject: "bench", Body: body, DeliverAt: due}, func(_ *producer.Message, err error) {
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
				wg.Done()
			}); err != nil {
				t.Fatal(err)
			}
		}
		wg.Wait()
		elapsed := time.Since(start)
		if firstErr != nil {
			t.Fatalf("%s: %v", mode, firstErr)
		}
		return n / elapsed.Seconds()
	}
	rates := map[string][]float64{}
	for round := range 3 {
		for _, mode := range []string{"alone", "slave", "wait-slave"} {
			r := run(mode)
			rates[mode] = append(rates[mode], r)
			t.Logf("round %d %-10s %8.0f msg/s", round+1, mode, r)
		}
	}
	sum := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s
	}
	fmt.Printf("metric delay_send_rate_alone %.0f msg/s\n", sum(rates["alone"])/3)
	fmt.Printf("metric delay_send_with_slave_ratio %.2f ratio\n", sum(rates["slave"])/sum(rates["alone"]))
	fmt.Printf("metric delay_send_wait_slave_ratio %.2f ratio\n", sum(rates["wait-slave"])/sum(rates["alone"]))
}

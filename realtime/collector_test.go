package realtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/qmq-go/qmq/consumer"
)

// metricValue returns the value of the gauge or counter name whose labels
// include want, and whether there is one.
func metricValue(t *testing.T, reg prometheus.Gatherer, name string, want map[string]string) (float64, bool) {
	t.Helper()
	m := findSeries(t, reg, name, want)
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue(), true
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue(), true
	}
	return 0, false
}

// findSeries returns the first series of name whose labels include want,
// or nil.
func findSeries(t *testing.T, reg prometheus.Gatherer, name string, want map[string]string) *dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue series
				}
			}
			return m
		}
	}
	return nil
}

// The broker's scrape-time series follow a consumer group: its backlog and
// un-acked messages add up to what was sent while it holds messages, and
// both drop to zero once it acks them; connections and requests by command
// are counted.
func TestBroker_MetricsFollowAGroup(t *testing.T) {
	b := startBroker(t, t.TempDir())
	reg := b.Registry()
	p := newProducer(t, b.addr())
	c := newConsumer(t, "c1", b.addr())
	pl, err := c.Puller("metrics.subject", "g", consumer.StartEarliest())
	if err != nil {
		t.Fatal(err)
	}
	const sent = 50
	sendN(t, p, "metrics.subject", sent, nil)

	var held []*consumer.Message
	deadline := time.Now().Add(20 * time.Second)
	for len(held) < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("pulled %d of 20", len(held))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		msgs, err := pl.Pull(ctx, 20-len(held))
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		held = append(held, msgs...)
	}

	group := map[string]string{"subject": "metrics.subject", "consumer_group": "g"}
	backlog, ok := metricValue(t, reg, "qmq_realtime_backlog_messages", group)
	if !ok {
		t.Fatal("no qmq_realtime_backlog_messages series for the group")
	}
	unacked, _ := metricValue(t, reg, "qmq_realtime_unacked_messages", group)
	if backlog+unacked != sent || unacked < float64(len(held)) {
		t.Fatalf("backlog %v + unacked %v, want %d in all with at least the %d held un-acked", backlog, unacked, sent, len(held))
	}
	for name, least := range map[string]float64{
		"qmq_realtime_connections":        2, // the producer's and the consumer's
		"qmq_realtime_consumer_groups":    1,
		"qmq_realtime_consumers":          1,
		"qmq_realtime_subjects":           1,
		"qmq_realtime_message_log_bytes":  1,
		"qmq_realtime_requests_in_flight": 0,
	} {
		if v, ok := metricValue(t, reg, name, nil); !ok || v < least {
			t.Errorf("%s = %v (present %v), want at least %v", name, v, ok, least)
		}
	}
	for _, cmd := range []string{"send", "pull"} {
		if v, _ := metricValue(t, reg, "qmq_realtime_requests_total", map[string]string{"command": cmd}); v < 1 {
			t.Errorf("qmq_realtime_requests_total{command=%q} = %v, want at least 1", cmd, v)
		}
	}

	// Take and ack everything: both series go to zero.
	for _, m := range held {
		m.Ack()
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		backlog, _ = metricValue(t, reg, "qmq_realtime_backlog_messages", group)
		unacked, _ = metricValue(t, reg, "qmq_realtime_unacked_messages", group)
		if backlog == 0 && unacked == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after acking everything: backlog %v, unacked %v", backlog, unacked)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		msgs, _ := pl.Pull(ctx, 64)
		cancel()
		for _, m := range msgs {
			m.Ack()
		}
	}
	if v, _ := metricValue(t, reg, "qmq_realtime_requests_total", map[string]string{"command": "ack"}); v < 1 {
		t.Errorf("qmq_realtime_requests_total{command=\"ack\"} = %v, want at least 1", v)
	}
}

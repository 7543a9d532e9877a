package realtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/testutil"
	"github.com/qmq-go/qmq/pkg/transport"
)

// deadCountInStats returns group's dead-letter count for subject as
// CmdBrokerStats answers it (the group's backlog on its dead subject).
func deadCountInStats(t *testing.T, tc *transport.Client, addr, subject, group string) (uint64, bool) {
	t.Helper()
	body, err := tc.Call(context.Background(), addr, protocol.CmdBrokerStats, protocol.AppendBrokerStatsRequest(nil, &protocol.BrokerStatsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	st, err := protocol.DecodeBrokerStatsResponse(body)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Subjects {
		if s.Subject != protocol.DeadSubject(subject, group) {
			continue
		}
		for _, g := range s.Groups {
			if g.Group == group {
				return g.Backlog, true
			}
		}
	}
	return 0, false
}

// A dead letter says why it died: the handler's last error text, its
// attempts and when; retried copies carry the error of the failure before.
// Each group's dead letters are counted in the broker's stats and metrics,
// and the counts follow re-drives and purges.
func TestBroker_DeadLettersSayWhy(t *testing.T) {
	b := startBroker(t, t.TempDir())
	p := newProducer(t, b.addr())
	c := newConsumer(t, "c1", b.addr())
	seenErrors := make(chan string, 100)
	if _, err := c.Subscribe("orders", "billing", func(ctx context.Context, m *consumer.Message) error {
		if m.Attempts > 0 {
			e, _ := m.Property(protocol.PropError)
			seenErrors <- e
		}
		return fmt.Errorf("attempt %d of %s: card declined", m.Attempts+1, m.ID)
	}, consumer.StartEarliest(), consumer.MaxAttempts(2), consumer.RetryBackoff(10*time.Millisecond, 10*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ids := sendN(t, p, "orders", 3, nil)
	tc, _ := transport.New(fastTransport, nil)
	defer tc.Close()
	list := protocol.DeadLettersRequest{Action: protocol.DeadLettersList, Subject: "orders", Group: "billing"}
	var dl protocol.DeadLettersResponse
	testutil.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if dl = deadLetters(t, tc, b.addr(), list); dl.Total != 3 {
			return fmt.Errorf("%d dead letters", dl.Total)
		}
		return nil
	})
	for _, l := range dl.Letters {
		m, err := protocol.DecodeMessage(l.Message)
		if err != nil {
			t.Fatal(err)
		}
		f, ok := protocol.FailureOf(m.Properties)
		if !ok {
			t.Fatalf("dead letter %s carries no failure: %v", m.ID, m.Properties)
		}
		if want := "attempt 2 of " + m.ID + ": card declined"; f.Error != want {
			t.Errorf("dead letter %s: error %q, want %q", m.ID, f.Error, want)
		}
		if m.Attempts != 2 || f.DeadWhy == "" {
			t.Errorf("dead letter %s: attempts %d, why %q", m.ID, m.Attempts, f.DeadWhy)
		}
		if f.FailedAt.Before(start.Add(-time.Second)) || f.FailedAt.After(time.Now().Add(time.Second)) {
			t.Errorf("dead letter %s: died at %v, outside the test", m.ID, f.FailedAt)
		}
	}
	// The retried copies carried the first failure's text to the handler.
	for range ids {
		select {
		case e := <-seenErrors:
			if !strings.HasPrefix(e, "attempt 1 of ") || !strings.HasSuffix(e, ": card declined") {
				t.Fatalf("a retried message carried error text %q, want the first attempt's", e)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("retried messages not seen")
		}
	}
	if n, ok := deadCountInStats(t, tc, b.addr(), "orders", "billing"); !ok || n != 3 {
		t.Fatalf("stats: dead letters %d (%v), want 3", n, ok)
	}
	labels := map[string]string{"subject": "orders", "consumer_group": "billing"}
	if v, ok := metricValue(t, b.Registry(), "qmq_realtime_dead_letters", labels); !ok || v != 3 {
		t.Fatalf("metric qmq_realtime_dead_letters = %v (%v), want 3", v, ok)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Purge one: both counts follow (the count starts over on a removal).
	deadLetters(t, tc, b.addr(), protocol.DeadLettersRequest{Action: protocol.DeadLettersPurge, Subject: "orders", Group: "billing", IDs: ids[:1]})
	if n, _ := deadCountInStats(t, tc, b.addr(), "orders", "billing"); n != 2 {
		t.Fatalf("stats after a purge: %d dead letters, want 2", n)
	}
	if v, _ := metricValue(t, b.Registry(), "qmq_realtime_dead_letters", labels); v != 2 {
		t.Fatalf("metric after a purge: %v, want 2", v)
	}
	// New letters are counted incrementally on top.
	c2 := newConsumer(t, "c2", b.addr())
	if _, err := c2.Subscribe("orders", "billing", func(ctx context.Context, m *consumer.Message) error {
		return errors.New("still declined")
	}, consumer.MaxAttempts(1)); err != nil {
		t.Fatal(err)
	}
	testutil.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		sendN(t, p, "orders", 1, nil)
		if n, _ := deadCountInStats(t, tc, b.addr(), "orders", "billing"); n < 3 {
			return fmt.Errorf("%d dead letters counted", n)
		}
		return nil
	})
	if err := c2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, _ := deadCountInStats(t, tc, b.addr(), "orders", "billing")
	if dl := deadLetters(t, tc, b.addr(), list); dl.Total != n {
		t.Fatalf("stats count %d, listing total %d", n, dl.Total)
	}
}

package metaserver_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/metaserver/ctl"
	"github.com/qmq-go/qmq/producer"
)

// Dead letters say why through the admin API and qmqctl: each carries its
// handler's last error, attempts and time of death, and every consumer
// group shows how many it holds, on real brokers.
func TestE2E_DeadLettersSayWhy(t *testing.T) {
	t.Parallel()
	cl := startE2ECluster(t)
	ctx := context.Background()
	admin := api.NewClient(cl.meta.HTTPAddr().String(), "t", 5*time.Second)
	p, err := producer.New(producer.WithResolver(cl.mc), producer.WithSendTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(ctx) })
	c, err := consumer.New(consumer.WithResolver(cl.mc), consumer.WithConsumerID("dead-why"), consumer.WithRouteRefresh(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe("orders", "billing", func(_ context.Context, m *consumer.Message) error {
		return fmt.Errorf("order %s: card declined", m.ID)
	}, consumer.StartEarliest(), consumer.MaxAttempts(2), consumer.RetryBackoff(10*time.Millisecond, 10*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	for i := range 6 {
		if err := p.Send(ctx, &producer.Message{Subject: "orders", ID: fmt.Sprintf("o-%d", i), Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	deadCount := func() uint64 {
		gs, err := admin.Consumers(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gs {
			if g.Group == "billing" {
				return g.DeadLetters
			}
		}
		return 0
	}
	waitFor(t, 30*time.Second, "6 dead letters counted", func() bool { return deadCount() == 6 })
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := admin.DeadLetters(ctx, "orders", "billing", 0, 100)
	if err != nil || d.Total != 6 || len(d.Letters) != 6 {
		t.Fatalf("dead letters: %+v, %v", d, err)
	}
	for _, l := range d.Letters {
		if l.LastError != "order "+l.ID+": card declined" || l.Attempts != 2 || l.DeadWhy == "" {
			t.Errorf("dead letter %s: error %q, attempts %d, why %q", l.ID, l.LastError, l.Attempts, l.DeadWhy)
		}
		if l.FailedAt == nil || l.FailedAt.Before(before.Add(-time.Second)) || l.FailedAt.After(time.Now()) {
			t.Errorf("dead letter %s: died at %v", l.ID, l.FailedAt)
		}
	}
	tok := tokenFlag(t, "t")
	qmqctl := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := ctl.Main(append([]string{"--meta=" + cl.meta.HTTPAddr().String(), tok}, args...), &out, &errOut); code != 0 {
			t.Fatalf("qmqctl %v: exit %d: %s%s", args, code, out.String(), errOut.String())
		}
		return out.String()
	}
	list := qmqctl("dead", "list", "orders", "billing")
	for _, want := range []string{"6 dead letters", "DIED", "LAST ERROR", "order o-3: card declined"} {
		if !strings.Contains(list, want) {
			t.Fatalf("qmqctl dead list lacks %q:\n%s", want, list)
		}
	}
	inspect := qmqctl("dead", "inspect", "orders", "billing", "o-1")
	for _, want := range []string{"died", "2 attempts failed", "order o-1: card declined"} {
		if !strings.Contains(inspect, want) {
			t.Fatalf("qmqctl dead inspect lacks %q:\n%s", want, inspect)
		}
	}
	consumers := qmqctl("consumers", "--subject", "orders")
	if !strings.Contains(consumers, "DEAD") {
		t.Fatalf("qmqctl consumers has no DEAD column:\n%s", consumers)
	}
	var row string
	for _, line := range strings.Split(consumers, "\n") {
		if strings.HasPrefix(line, "orders") && strings.Contains(line, "billing") {
			row = line
		}
	}
	if f := strings.Fields(row); len(f) < 5 || f[4] != "6" {
		t.Fatalf("qmqctl consumers row %q: want 6 dead letters in the DEAD column", row)
	}
	// A re-drive empties the count.
	if _, err := admin.RedriveDeadLetters(ctx, "orders", "billing", nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "no dead letters after a re-drive", func() bool { return deadCount() == 0 })
}

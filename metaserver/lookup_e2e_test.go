package metaserver_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/metaserver/ctl"
	"github.com/qmq-go/qmq/producer"
)

func events(t api.Trace) string {
	var out []string
	for _, e := range t.Events {
		s := e.Event
		if e.Attempt > 0 && (e.Event == "retried" || e.Event == "dead") {
			s += fmt.Sprint(e.Attempt)
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// Messages are found by id and by key on real brokers, with where they are
// stored and (for identities that may read bodies) their bodies, and each
// one's life is traced from the copies the brokers keep: plain, retried
// (with the handler's error text), dead-lettered and re-driven. Unknown
// ids and keys are not found, through the API and qmqctl.
func TestE2E_LookupAndTrace(t *testing.T) {
	t.Parallel()
	cl := startE2ECluster(t)
	ctx := context.Background()
	admin := api.NewClient(cl.meta.HTTPAddr().String(), "t", 10*time.Second)
	anonymous := api.NewClient(cl.meta.HTTPAddr().String(), "", 10*time.Second)
	p, err := producer.New(producer.WithResolver(cl.mc), producer.WithSendTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(ctx) })
	var healed atomic.Bool
	var mu sync.Mutex
	handled := map[string]int{}
	c, err := consumer.New(consumer.WithResolver(cl.mc), consumer.WithConsumerID("tracer"), consumer.WithRouteRefresh(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(ctx) })
	if _, err := c.Subscribe("orders", "billing", func(_ context.Context, m *consumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		handled[m.ID]++
		switch {
		case m.ID == "o-retry" && handled[m.ID] <= 2:
			return fmt.Errorf("inventory busy (try %d)", handled[m.ID])
		case m.ID == "o-dead" && !healed.Load():
			return errors.New("card declined")
		}
		return nil
	}, consumer.StartEarliest(), consumer.MaxAttempts(3), consumer.RetryBackoff(10*time.Millisecond, 20*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"o-plain", "o-retry", "o-dead", "o-other"} {
		m := &producer.Message{Subject: "orders", ID: id, Body: []byte("body of " + id)}
		producer.SetKey(m, fmt.Sprintf("order-%d", 40+i%2)) // o-plain, o-dead: order-40
		if err := p.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "o-dead dead", func() bool {
		d, err := admin.DeadLetters(ctx, "orders", "billing", 0, 10)
		return err == nil && d.Total == 1
	})
	healed.Store(true)
	if _, err := admin.RedriveDeadLetters(ctx, "orders", "billing", []string{"o-dead"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "o-dead handled after the re-drive", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return handled["o-dead"] == 4 && handled["o-retry"] == 3
	})

	l, err := admin.LookupID(ctx, "o-plain")
	if err != nil || len(l.Messages) != 1 {
		t.Fatalf("lookup o-plain: %+v, %v", l, err)
	}
	m := l.Messages[0]
	if m.Kind != "message" || m.Subject != "orders" || m.BrokerGroup == "" || m.StoredAt.IsZero() || m.Body != "body of o-plain" || m.Properties["qmq.key"] != "order-40" {
		t.Fatalf("lookup o-plain: %+v", m)
	}
	if l, err := anonymous.LookupID(ctx, "o-plain"); err != nil || !l.Messages[0].BodyHidden || l.Messages[0].Body != "" {
		t.Fatalf("anonymous lookup shows the body: %+v, %v", l, err)
	}
	l, err = admin.LookupKey(ctx, "order-40")
	ids := map[string]bool{}
	for _, m := range l.Messages {
		ids[m.ID] = true
	}
	if err != nil || len(ids) != 2 || !ids["o-plain"] || !ids["o-dead"] {
		t.Fatalf("lookup key order-40 found %v, %v", ids, err)
	}
	for _, bad := range []func() error{
		func() error { _, err := admin.LookupID(ctx, "no-such-id"); return err },
		func() error { _, err := admin.LookupKey(ctx, "no-such-key"); return err },
		func() error { _, err := admin.TraceID(ctx, "no-such-id"); return err },
	} {
		if err := bad(); !api.IsNotFound(err) {
			t.Fatalf("unknown id or key: %v, want not found", err)
		}
	}

	trace := func(id, want string) api.Trace {
		t.Helper()
		var tr api.Trace
		var err error
		// Acks reach the brokers a few milliseconds after the handler.
		for deadline := time.Now().Add(10 * time.Second); ; {
			if tr, err = admin.TraceID(ctx, id); err == nil && events(tr) == want {
				return tr
			}
			if time.Now().After(deadline) {
				t.Fatalf("trace %s: %q, %v; want %q", id, events(tr), err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	trace("o-plain", "sent stored acked")
	tr := trace("o-retry", "sent stored acked retried1 acked retried2 acked")
	if e := tr.Events[5]; e.Error != "inventory busy (try 2)" || e.Group != "billing" || e.NextDue == nil {
		t.Fatalf("second retry: %+v", e)
	}
	tr = trace("o-dead", "sent stored acked retried1 acked retried2 acked dead3 redriven acked")
	if e := tr.Events[7]; e.Error != "card declined" || e.Detail == "" {
		t.Fatalf("dead event: %+v", e)
	}
	// A message a consumer holds un-acked is traced as pulled by it, one
	// no consumer took yet as waiting.
	var release sync.WaitGroup
	release.Add(1)
	pulled := make(chan struct{})
	c2, err := consumer.New(consumer.WithResolver(cl.mc), consumer.WithConsumerID("holder"), consumer.WithRouteRefresh(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Subscribe("orders", "audit", func(_ context.Context, m *consumer.Message) error {
		if m.ID == "o-held" {
			close(pulled)
			release.Wait()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "audit group created", func() bool {
		gs, _ := admin.Consumers(ctx, "orders")
		for _, g := range gs {
			if g.Group == "audit" && len(g.PerBroker) > 0 {
				return true
			}
		}
		return false
	})
	if err := p.Send(ctx, &producer.Message{Subject: "orders", ID: "o-held", Body: []byte("held")}); err != nil {
		t.Fatal(err)
	}
	<-pulled
	tr = trace("o-held", "sent stored pulled acked")
	if e := tr.Events[2]; e.Group != "audit" || e.Consumer != "holder" {
		t.Fatalf("pulled event: %+v", e)
	}
	release.Done()
	if err := c2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	trace("o-held", "sent stored acked acked")

	tok := tokenFlag(t, "t")
	qmqctl := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := ctl.Main(append([]string{"--meta=" + cl.meta.HTTPAddr().String(), tok}, args...), &out, &errOut); code != want {
			t.Fatalf("qmqctl %v: exit %d, want %d: %s%s", args, code, want, out.String(), errOut.String())
		}
		return out.String() + errOut.String()
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"lookup", "o-plain"}, []string{"o-plain", "broker group", "body of o-plain", "qmq.key=order-40"}},
		{[]string{"lookup", "--key", "order-41"}, []string{"o-retry", "o-other", "inventory busy"}},
		{[]string{"trace", "o-dead"}, []string{"sent", "stored", "retried", "dead", "redriven", "card declined"}},
		{[]string{"trace", "--key", "order-40"}, []string{"message o-plain of orders", "message o-dead of orders"}},
	} {
		out := qmqctl(0, c.args...)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Fatalf("qmqctl %v lacks %q:\n%s", c.args, w, out)
			}
		}
	}
	if out := qmqctl(ctl.ExitNotFound, "lookup", "no-such-id"); !strings.Contains(out, "not found") {
		t.Fatalf("qmqctl lookup of an unknown id: %s", out)
	}
	qmqctl(ctl.ExitNotFound, "trace", "--key", "no-such-key")
}

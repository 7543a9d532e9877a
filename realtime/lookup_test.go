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
	"github.com/qmq-go/qmq/producer"
)

// findMessages asks addr for the messages with id or key and returns
// "subject/id" of each, oldest first.
func findMessages(t *testing.T, tc *transport.Client, addr string, by protocol.FindBy, v string) []string {
	t.Helper()
	body, err := tc.Call(context.Background(), addr, protocol.CmdFindMessages, protocol.AppendFindMessagesRequest(nil, &protocol.FindMessagesRequest{By: by, Value: v}))
	if err != nil {
		t.Fatalf("find %q: %v", v, err)
	}
	r, err := protocol.DecodeFindMessagesResponse(body)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range r.Messages {
		m, err := protocol.DecodeMessage(f.Message)
		if err != nil {
			t.Fatal(err)
		}
		if f.Flags&protocol.FoundBodyHidden != 0 || string(m.Body) != "body of "+m.ID {
			t.Fatalf("found %s with body %q, flags %d", m.ID, m.Body, f.Flags)
		}
		out = append(out, m.Subject+"/"+m.ID)
	}
	return out
}

// Stored messages are found by id (with their retry and dead-letter
// copies) and by key on the master and on its slave, and on the slave
// once it is promoted; unknown ids and keys find nothing.
func TestReplication_FindMessagesOnMasterSlaveAndPromoted(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	m := startBroker(t, mdir, replOptions)
	s := startSlave(t, sdir, m.addr())
	tc := newClient(t)
	p := newProducer(t, m.addr())
	for i := range 20 {
		msg := &producer.Message{Subject: "orders", ID: fmt.Sprintf("o-%d", i), Body: []byte(fmt.Sprintf("body of o-%d", i))}
		producer.SetKey(msg, fmt.Sprintf("order-%d", i%5))
		if err := p.Send(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
	}
	c := newConsumer(t, "c1", m.addr())
	if _, err := c.Subscribe("orders", "billing", func(_ context.Context, msg *consumer.Message) error {
		if msg.ID == "o-3" {
			return errors.New("declined")
		}
		return nil
	}, consumer.StartEarliest(), consumer.MaxAttempts(2), consumer.RetryBackoff(10*time.Millisecond, 10*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	wantO3 := "orders/o-3 %RETRY%orders%billing/o-3 %DEAD%orders%billing/o-3"
	testutil.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if got := strings.Join(findMessages(t, tc, m.addr(), protocol.FindByID, "o-3"), " "); got != wantO3 {
			return fmt.Errorf("o-3 found as %q", got)
		}
		return nil
	})
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	check := func(addr, where string) {
		t.Helper()
		if got := strings.Join(findMessages(t, tc, addr, protocol.FindByID, "o-3"), " "); got != wantO3 {
			t.Fatalf("%s: o-3 found as %q, want %q", where, got, wantO3)
		}
		if got := strings.Join(findMessages(t, tc, addr, protocol.FindByKey, "order-2"), " "); got != "orders/o-2 orders/o-7 orders/o-12 orders/o-17" {
			t.Fatalf("%s: key order-2 found %q", where, got)
		}
		if got := findMessages(t, tc, addr, protocol.FindByID, "o-20"); len(got) != 0 {
			t.Fatalf("%s: unknown id found %v", where, got)
		}
		if got := findMessages(t, tc, addr, protocol.FindByKey, "order-5"); len(got) != 0 {
			t.Fatalf("%s: unknown key found %v", where, got)
		}
	}
	check(m.addr(), "master")
	waitCaughtUp(t, m, 20*time.Second)
	testutil.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if got := strings.Join(findMessages(t, tc, s.addr(), protocol.FindByID, "o-3"), " "); got != wantO3 {
			return fmt.Errorf("slave: o-3 found as %q", got)
		}
		return nil
	})
	check(s.addr(), "slave")
	for _, b := range []*testBroker{s, m} {
		if err := b.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	promoted := startBroker(t, sdir, replOptions)
	check(promoted.addr(), "promoted slave")
}

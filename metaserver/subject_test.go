package metaserver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// The subject page's endpoint adds up what the route's masters report: the
// subject's messages and in-rate, each group's backlog, and per consumer
// the un-acked messages over the brokers and the latest pull; a consumer
// only a broker knows is listed, and an unknown subject is 404.
func TestAdminAPI_Subject(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	c := newClient(t)
	b1, b2 := ordersOnTwoGroups(t, s, c)
	if _, err := c.heartbeat(s, protocol.ClientHeartbeatRequest{ClientType: protocol.ClientConsumer, Subject: "orders", Group: "billing", ClientID: "c1"}); err != nil {
		t.Fatal(err)
	}
	early, late := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 10, 0, 5, 0, time.UTC)
	b1.stats = protocol.BrokerStatsResponse{Subjects: []protocol.SubjectStats{{Subject: "orders", Messages: 100, InPerSec: 40,
		Groups: []protocol.GroupStats{{Group: "billing", Cursor: 90, Backlog: 10, OutPerSec: 30, Consumers: []protocol.ConsumerStats{
			{Consumer: "c1", Unacked: 3, LastSeen: late}, {Consumer: "c2", Flags: protocol.ConsumerOffline, Unacked: 1, LastSeen: early}}}}}}}
	b2.stats = protocol.BrokerStatsResponse{Subjects: []protocol.SubjectStats{{Subject: "orders", Messages: 50, InPerSec: 2,
		Groups: []protocol.GroupStats{{Group: "billing", Cursor: 30, Backlog: 20, OutPerSec: 5, Consumers: []protocol.ConsumerStats{
			{Consumer: "c1", Unacked: 4, LastSeen: early}}}}}}}
	eventually(t, 5*time.Second, "the consumer registered", func() bool {
		s.view.mu.RLock()
		defer s.view.mu.RUnlock()
		return len(s.view.consumers) == 1
	})
	ctx := context.Background()
	cl := admin(s, testToken)
	sub, err := cl.Subject(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if sub.Messages != 150 || sub.InPerSec != 42 || len(sub.Routes) != 1 || len(sub.Routes[0].Groups) != 2 || len(sub.Groups) != 1 {
		t.Fatalf("subject: %+v", sub)
	}
	g := sub.Groups[0]
	if g.Group != "billing" || g.Backlog != 30 || g.OutPerSec != 35 || len(g.PerBroker) != 2 || len(g.Consumers) != 2 ||
		g.PerBroker[0].OutPerSec+g.PerBroker[1].OutPerSec != 35 {
		t.Fatalf("group: %+v", g)
	}
	c1, c2 := g.Consumers[0], g.Consumers[1]
	if c1.ClientID != "c1" || c1.Unacked != 7 || c1.LastPull == nil || !c1.LastPull.Equal(late) || c1.Since.IsZero() || !c1.Online {
		t.Fatalf("c1: %+v", c1)
	}
	if c2.ClientID != "c2" || c2.Unacked != 1 || c2.LastPull == nil || !c2.LastPull.Equal(early) || !c2.Since.IsZero() || c2.Online {
		t.Fatalf("c2 (known only to a broker, taken offline there): %+v", c2)
	}
	if _, err := cl.Subject(ctx, "nosuchsubject"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("an unknown subject: %v", err)
	}
	if _, err := cl.Subject(ctx, "bad subject!"); !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("a bad subject name: %v", err)
	}
}

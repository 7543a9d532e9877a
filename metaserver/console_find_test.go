package metaserver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// startFindBroker is a realtime master that answers CmdFindMessages with
// found for the id "o-1" and the key "k-1", nothing otherwise.
func startFindBroker(t *testing.T, found []protocol.FoundMessage) string {
	t.Helper()
	mux := netserver.NewMux()
	mux.HandleFunc(protocol.CmdFindMessages, func(r *netserver.Request) {
		q, err := protocol.DecodeFindMessagesRequest(r.Body)
		if err != nil {
			r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
			return
		}
		var resp protocol.FindMessagesResponse
		if q.Value == "o-1" || q.Value == "k-1" {
			resp.Messages = found
		}
		r.Reply(protocol.StatusOK, protocol.AppendFindMessagesResponse(nil, &resp))
	})
	srv, err := netserver.New(netserver.Options{}, mux, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	return srv.Addr().String()
}

// The console's "Find a message" page shows a message's life (sent,
// stored, pulled, retried with the handler's error, dead) in local time
// and its stored copies, hides bodies from a visitor without the read
// bodies right, and says "not found" for an unknown id.
func TestConsole_FindAMessage(t *testing.T) {
	t.Parallel()
	if chromiumPath() == "" {
		t.Skip("chromium is absent (apt-get install chromium)")
	}
	s := startServer(t, startEtcd(t), func(o *Options) { o.BrokerTTL = time.Minute })
	c := newClient(t)
	enc := func(m *protocol.Message) []byte {
		raw, err := protocol.AppendMessage(nil, m, protocol.DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	created := time.UnixMilli(1_700_000_000_000)
	orig := &protocol.Message{Subject: "orders", ID: "o-1", Body: []byte("the order"), Created: created,
		Properties: []protocol.Property{{Key: protocol.PropKey, Value: "k-1"}}}
	retry := &protocol.Message{Subject: protocol.RetrySubject("orders", "billing"), ID: "o-1", Body: []byte("the order"), Created: created,
		Attempts: 1, DeliverAt: created.Add(5 * time.Second)}
	protocol.RecordFailure(retry, protocol.Failure{Error: "card declined", FailedAt: created.Add(time.Second)})
	dead := &protocol.Message{Subject: protocol.DeadSubject("orders", "billing"), ID: "o-1", Body: []byte("the order"), Created: created, Attempts: 2}
	protocol.RecordFailure(dead, protocol.Failure{Error: "card declined again", FailedAt: created.Add(6 * time.Second), DeadWhy: "2 attempts failed (max attempts 2)"})
	addr := startFindBroker(t, []protocol.FoundMessage{
		{Offset: 100, Seq: 7, Stored: created.UnixMilli() + 10, Message: enc(orig),
			Deliveries: []protocol.GroupDelivery{{Group: "audit", State: protocol.DeliveryUnacked, Consumer: "auditor-1", PullSeq: 3}, {Group: "billing", State: protocol.DeliveryDone}}},
		{Offset: 200, Seq: 0, Stored: created.UnixMilli() + 1010, Message: enc(retry), Deliveries: []protocol.GroupDelivery{{Group: "billing", State: protocol.DeliveryDone}}},
		{Offset: 300, Seq: 0, Stored: created.UnixMilli() + 6010, Message: enc(dead)},
	})
	c.mustRegister(s, master("g1", addr))
	eventually(t, 5*time.Second, "one group", func() bool { return len(s.groups()) == 1 })

	ch := startChromium(t)
	base := "http://" + s.HTTPAddr().String() + "/"
	ch.navigate(base + "#find/id/o-1")
	text := ch.waitText("find", "Message o-1 of orders", "sent", "stored", "pulled", "auditor-1", "retried", "error: card declined",
		"dead", "2 attempts failed", "Stored copies", "hidden (needs read bodies)")
	if strings.Contains(text, "the order") {
		t.Fatalf("the find page shows a body to a visitor without credentials:\n%s", text)
	}
	want := []string{"sent", "stored", "pulled", "acked", "retried", "acked", "dead"}
	if got := ch.eval("[...document.querySelectorAll('#find-result tr[data-event] .event')].map(e => e.textContent).join(' ')"); got != strings.Join(want, " ") {
		t.Fatalf("events %q, want %q", got, strings.Join(want, " "))
	}
	local := ch.eval("new Date(1700000006000).toLocaleString()")
	if got := ch.eval("document.querySelector('#find-result tr[data-event=dead] td').textContent"); got != local {
		t.Fatalf("dead at %q, want the browser's local time %q", got, local)
	}
	ch.screenshot("find")
	// With the admin token the body shows; by key finds the same message.
	ch.eval("localStorage.setItem('qmq.token', '" + testToken + "')")
	ch.navigate(base + "#find/key/k-1")
	ch.waitText("find", "Message o-1 of orders", "the order")
	ch.navigate(base + "#find/id/no-such-id")
	ch.waitText("find", "not found: no message with id no-such-id")
}

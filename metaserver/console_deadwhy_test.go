package metaserver

import (
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// The console shows why dead letters died (last error, why, when, in local
// time), counts them per consumer group on the consumers page and lists
// every group that has some on the overview; "Re-drive all" asks first and
// does nothing when the answer is no.
func TestConsole_DeadLettersSayWhy(t *testing.T) {
	t.Parallel()
	if chromiumPath() == "" {
		t.Skip("chromium is absent (apt-get install chromium)")
	}
	s := startServer(t, startEtcd(t), func(o *Options) { o.BrokerTTL = time.Minute }) // nothing heartbeats here
	c := newClient(t)
	b1 := startFakeBroker(t, "g1")
	c.mustRegister(s, master("g1", b1.addr()))
	eventually(t, 5*time.Second, "one group", func() bool { return len(s.groups()) == 1 })
	c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
	b1.stats = protocol.BrokerStatsResponse{Subjects: []protocol.SubjectStats{
		{Subject: "orders", Messages: 50, Groups: []protocol.GroupStats{{Group: "billing", Cursor: 50}}},
		{Subject: protocol.DeadSubject("orders", "billing"), Messages: 2, Groups: []protocol.GroupStats{{Group: "billing", Backlog: 2}}},
	}}
	for i, id := range []string{"dl-1", "dl-2"} {
		m := &protocol.Message{Subject: protocol.DeadSubject("orders", "billing"), ID: id, Body: []byte("b"), Created: time.UnixMilli(1_700_000_000_000), Attempts: 16}
		protocol.RecordFailure(m, protocol.Failure{Error: "card declined for " + id, FailedAt: time.UnixMilli(1_700_000_100_000), DeadWhy: "16 attempts failed (max attempts 16)"})
		raw, err := protocol.AppendMessage(nil, m, protocol.DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		b1.mu.Lock()
		b1.dead = append(b1.dead, protocol.DeadLetter{Seq: uint64(i + 1), Message: raw})
		b1.mu.Unlock()
	}

	ch := startChromium(t)
	base := "http://" + s.HTTPAddr().String() + "/"
	ch.navigate(base + "#subjects")
	ch.waitText("subjects", "orders")
	ch.eval("localStorage.setItem('qmq.token', '" + testToken + "')")
	ch.navigate(base + "#overview")
	ch.waitText("overview", "Groups with dead letters", "billing")
	if got := ch.eval("document.querySelector('#dead-overview tr[data-group=billing] .dead-count').textContent"); got != "2" {
		t.Fatalf("overview shows %q dead letters for billing, want 2", got)
	}
	ch.navigate(base + "#consumers")
	ch.waitText("consumers", "billing")
	if got := ch.eval("document.querySelector('tr[data-group=billing] .dead-count').textContent"); got != "2" {
		t.Fatalf("consumers page shows %q dead letters, want 2", got)
	}
	ch.navigate(base + "#dead/orders/billing")
	text := ch.waitText("dead", "card declined for dl-1", "card declined for dl-2", "16 attempts failed", "2 dead letters")
	if strings.Contains(text, "1700000100000") || strings.Contains(text, "2023-11-14T22:15:00Z") {
		t.Fatalf("the page shows a raw time, not local time:\n%s", text)
	}
	local := ch.eval("new Date(1700000100000).toLocaleString()")
	if got := ch.eval("document.querySelector('tr[data-id=dl-1] .died').textContent"); got != local {
		t.Fatalf("died %q, want the browser's local time %q", got, local)
	}
	ch.screenshot("dead-why")

	// "Re-drive all" asks first: refused, nothing happens; accepted, all go.
	ch.eval("window.confirm = m => { window.asked = m; return false; }")
	ch.eval("document.querySelector('button[data-action=redrive-all]').click()")
	if asked := ch.eval("window.asked || ''"); !strings.Contains(asked, "Re-drive every dead letter of orders/billing") {
		t.Fatalf("re-drive all asked %q", asked)
	}
	time.Sleep(200 * time.Millisecond) // a request the page should not send would be on its way
	b1.mu.Lock()
	n := len(b1.redriven)
	b1.mu.Unlock()
	if n != 0 {
		t.Fatalf("declined re-drive all re-drove %d letters", n)
	}
	ch.eval("window.confirm = () => true")
	ch.eval("document.querySelector('button[data-action=redrive-all]').click()")
	eventually(t, 10*time.Second, "both letters re-driven", func() bool {
		b1.mu.Lock()
		defer b1.mu.Unlock()
		return len(b1.redriven) == 2
	})
}

package metaserver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// The meta server samples the cluster's rates (from heartbeats), backlog
// (from the masters, once the history was asked for) and delay pending,
// and the console's overview draws them as charts of the last hour.
func TestHistory_SamplesAndConsoleCharts(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), func(o *Options) { o.BrokerTTL = time.Minute; o.HistoryInterval = 100 * time.Millisecond })
	c := newClient(t)
	b1 := startFakeBroker(t, "g1")
	b1.mu.Lock()
	b1.stats = protocol.BrokerStatsResponse{Subjects: []protocol.SubjectStats{{Subject: "orders", Messages: 50, Groups: []protocol.GroupStats{{Group: "billing", Cursor: 43, Backlog: 7}}}}}
	b1.mu.Unlock()
	reg := master("g1", b1.addr())
	reg.Load = protocol.BrokerLoad{InPerSec: 500, OutPerSec: 300}
	c.mustRegister(s, reg)
	c.mustRegister(s, protocol.RegisterRequest{Kind: protocol.KindDelay, Role: protocol.RoleMaster, State: protocol.GroupReadWrite,
		Group: "d1", BrokerID: "d1-m", Address: "127.0.0.1:1", Load: protocol.BrokerLoad{Pending: 1234}})
	c.mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
	admin := api.NewClient(s.HTTPAddr().String(), testToken, 5*time.Second)
	var h api.History
	if err := admin.Do(context.Background(), "GET", "/history", nil, &h); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "samples with rates, backlog and pending", func() bool {
		if err := admin.Do(context.Background(), "GET", "/history", nil, &h); err != nil || len(h.Samples) < 3 {
			return false
		}
		x := h.Samples[len(h.Samples)-1]
		return x.InPerSec == 500 && x.OutPerSec == 300 && x.Backlog == 7 && x.DelayPending == 1234
	})
	if h.IntervalSeconds != 0.1 {
		t.Fatalf("interval %v", h.IntervalSeconds)
	}
	if chromiumPath() == "" {
		t.Skip("chromium is absent (apt-get install chromium)")
	}
	ch := startChromium(t)
	ch.navigate("http://" + s.HTTPAddr().String() + "/#overview")
	ch.waitText("overview", "Last hour", "messages per second: in 500, out 300", "backlog (messages): backlog 7", "delay pending (messages): pending 1234")
	points := ch.eval("document.querySelector('#chart-rates polyline[data-series=in]').getAttribute('points')")
	if n := len(strings.Fields(points)); n < 3 {
		t.Fatalf("the rates chart draws %d points: %q", n, points)
	}
	ch.screenshot("history")
}

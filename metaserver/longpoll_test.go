package metaserver

import (
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// A long-polling lookup is held while the answer is the one the client
// has, answered as soon as a change of the group makes it differ, and
// answered after its wait when nothing changes.
func TestLookup_LongPollAnswersOnChange(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), nil)
	c := newClient(t)
	b := startFakeBroker(t, "g1")
	m := c.mustRegister(s, master("g1", b.addr()))
	req := protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"}
	first := c.mustLookup(s, req)
	req.Wait, req.Known = 500*time.Millisecond, protocol.RouteHash(&first)
	start := time.Now()
	held := c.mustLookup(s, req)
	if d := time.Since(start); d < 400*time.Millisecond || protocol.RouteHash(&held) != req.Known {
		t.Fatalf("an unchanged long poll answered after %v with %+v", d, held)
	}

	req.Wait = 10 * time.Second
	type answer struct {
		resp protocol.LookupResponse
		at   time.Time
	}
	done := make(chan answer, 1)
	go func() {
		r, _ := c.lookup(s, req)
		done <- answer{r, time.Now()}
	}()
	time.Sleep(200 * time.Millisecond)
	hb := master("g1", b.addr())
	hb.LeaseID, hb.State = m.LeaseID, protocol.GroupReadonly
	changed := time.Now()
	c.mustRegister(s, hb)
	select {
	case a := <-done:
		if len(a.resp.Groups) != 1 || a.resp.Groups[0].State != protocol.GroupReadonly {
			t.Fatalf("long poll answered %+v", a.resp)
		}
		t.Logf("the long poll answered %v after the change", a.at.Sub(changed).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the long poll was not answered after the group changed")
	}
}

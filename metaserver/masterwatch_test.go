package metaserver

import (
	"context"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// TestMasterWatch_DeadMasterShownUnavailableAtOnce: a master whose
// connection closes without a goodbye (a killed process) and that does not
// answer a ping shows unavailable within a few seconds, long before its
// 30 s lease expires, in the admin API (qmqctl, the console); its seat and
// lookups stay (only the lease or a takeover moves it). A master whose
// connection closes but that answers stays rw.
func TestMasterWatch_DeadMasterShownUnavailableAtOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t, startEtcd(t), func(o *Options) { o.BrokerTTL = 30 * time.Second })
	alive := startFakeBroker(t, "g2")
	dead, live := newClient(t), newClient(t)
	dead.mustRegister(s, master("g1", "127.0.0.1:1")) // nothing answers there
	live.mustRegister(s, master("g2", alive.addr()))
	eventually(t, 5*time.Second, "both groups rw", func() bool {
		return adminGroupState(t, s, "g1") == "rw" && adminGroupState(t, s, "g2") == "rw"
	})

	killed := time.Now()
	_ = dead.tr.Close() // the connection closes; no leaving registration
	_ = live.tr.Close()
	eventually(t, 5*time.Second, "the dead master's group unavailable", func() bool { return adminGroupState(t, s, "g1") == "unavailable" })
	if took := time.Since(killed); took > 4*time.Second {
		t.Fatalf("marked after %v, want within a few seconds (the lease is 30 s)", took)
	}
	if !s.masterSeated("g1", "g1-m") {
		t.Fatal("the mark moved the seat: only the lease or a takeover may")
	}
	// Lookups do not follow the mark: only the admin view does.
	r := newClient(t).mustLookup(s, protocol.LookupRequest{ClientType: protocol.ClientProducer, Subject: "orders"})
	for _, g := range r.Groups {
		if g.Group == "g1" && g.State != protocol.GroupReadWrite {
			t.Fatalf("lookup shows g1 %v, want rw (its lease lives)", g.State)
		}
	}
	time.Sleep(2 * time.Second) // pings of the answering master had their chance
	if st := adminGroupState(t, s, "g2"); st != "rw" {
		t.Fatalf("the master that answers shows %s, want rw", st)
	}
	// The dead master comes back and registers: rw again.
	back := newClient(t)
	back.mustRegister(s, master("g1", "127.0.0.1:1"))
	if st := adminGroupState(t, s, "g1"); st != "rw" {
		t.Fatalf("after the master registered again g1 shows %s, want rw", st)
	}
}

func adminGroupState(t *testing.T, s *Server, group string) string {
	t.Helper()
	gs, err := admin(s, "").Groups(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		if g.Name == group {
			return g.State
		}
	}
	return "absent"
}

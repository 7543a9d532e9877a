package realtime

import (
	"testing"
	"time"

	"go.uber.org/zap"
)

// A slave that saw a master campaigns only once its copy caught up with
// it; one that never saw a master campaigns when configured as master or
// after two lease TTLs.
func TestNode_MayCampaign(t *testing.T) {
	slave := &Broker{replica: &replica{}}
	n := &Node{opts: Options{Role: RoleSlave}, lg: zap.NewNop(), startedAt: time.Now().Add(-time.Second)}
	if n.mayCampaign(slave, time.Minute) {
		t.Fatal("a slave campaigned within two TTLs of its start, never having seen a master")
	}
	if !n.mayCampaign(slave, time.Millisecond) {
		t.Fatal("a slave that never saw a master did not campaign after two TTLs")
	}
	n.opts.Role = RoleMaster
	if !n.mayCampaign(slave, time.Minute) {
		t.Fatal("a node configured as master did not campaign")
	}
	n.sawMaster = true
	if n.mayCampaign(slave, time.Millisecond) {
		t.Fatal("a slave whose copy never caught up with its master campaigned")
	}
	slave.replica.caughtUp.Store(true)
	if !n.mayCampaign(slave, time.Minute) {
		t.Fatal("a caught-up slave did not campaign when its master was gone")
	}
}

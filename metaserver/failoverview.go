package metaserver

import "github.com/qmq-go/qmq/metaserver/api"

// failoverFields fills a group's failover fields for the API: its master's
// write state and its eligible set (pkg/failover).
func failoverFields(ag *api.Group, g groupView) {
	if g.master != nil {
		ag.WriteState, ag.WriteReason = g.master.WriteState.String(), g.master.WriteReason
	}
	if e := g.eligible; e != nil {
		ag.Eligible, ag.Sync, ag.Released = e.Slave, e.Sync, e.Master == ""
	}
}

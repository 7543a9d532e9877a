package metaserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/protocol"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// errForceRefused: a forced failover of a group that has a live master or
// no slave (409).
var errForceRefused = errors.New("forced failover refused")

func (s *Server) postForceFailover(r *http.Request) (any, error) {
	var in api.ForceFailoverRequest
	if err := decodeBody(r, &in); err != nil {
		return nil, err
	}
	if !in.Force {
		return nil, fmt.Errorf("%w: an unclean failover may lose acknowledged messages: send {\"force\": true}", errBadInput)
	}
	return s.forceFailover(r.Context(), r.PathValue("group"))
}

// forceFailover lets group's slave (the broker holding its slave seat)
// take the group although it is not its eligible slave: the set names it,
// released, so its next heartbeat finds it may campaign. Only while the
// group has no master.
func (s *Server) forceFailover(ctx context.Context, group string) (api.ForcedFailover, error) {
	res := api.ForcedFailover{Group: group}
	if !protocol.IsName(group) {
		return res, protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("group %q must be A-Z a-z 0-9 . _ -", group))
	}
	for attempt := 0; attempt < maxSeatAttempts; attempt++ {
		st, err := s.readSeat(ctx, group)
		if err != nil {
			return res, err
		}
		if st.held != nil {
			return res, fmt.Errorf("group %s: %w: broker %s at %s is its live master (a switchover hands the group over cleanly)",
				group, errForceRefused, st.held.BrokerID, st.held.Address)
		}
		s.view.mu.RLock()
		slave, ok := s.view.brokers[brokerKey{group, protocol.RoleSlave}]
		s.view.mu.RUnlock()
		if !ok {
			return res, fmt.Errorf("group %s: %w: no slave is registered to take it", group, errForceRefused)
		}
		n := eligibleRecord{Slave: slave.rec.BrokerID, Forced: true, UpdatedAt: time.Now().UTC()}
		if st.set != nil {
			res.OldMaster, n.Sync, n.Epoch = st.set.Master, st.set.Sync, st.set.Epoch
		}
		key := s.keys.broker(group, protocol.RoleMaster)
		tctx, cancel := s.store.ctx(ctx)
		resp, err := s.etcd.Txn(tctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0), s.setGuard(group, st)).
			Then(clientv3.OpPut(s.keys.eligible(group), mustJSON(n))).Commit()
		cancel()
		if err != nil {
			return res, unavailable(etcdErr("forced failover", err))
		}
		if resp.Succeeded {
			res.Slave = n.Slave
			s.failoverMetrics.forced.Inc()
			s.lg.Warn("forced failover: an admin let the slave take the group uncleanly (what only the old master held is lost)",
				zap.String("group", group), zap.String("old_master", res.OldMaster), zap.String("slave", n.Slave))
			return res, nil
		}
	}
	return res, protocol.Errorf(protocol.StatusUnavailable, "group "+group+": the master seat kept changing; retry")
}

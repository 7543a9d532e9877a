package metaserver

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Elections and the eligible set (see pkg/failover for the safety
// argument). A group's master seat is its master key, on the master's
// lease; its eligible set (eligible/<group>) names the master it belongs to
// and the one slave that may take the group from it. Who may take a free
// seat:
//
//   - anyone, when the group has no set (a new group);
//   - the set's master (its lease lapsed: it wins again at a new epoch, its
//     slave stays eligible);
//   - the set's slave when the master released the group (switchover,
//     clean shutdown, forced failover), or when the set's master does not
//     answer a ping (CmdPing, takeoverPing): a master that answers keeps
//     the group even without its lease;
//   - nobody else: a slave that never caught up is never eligible.
//
// A takeover (RegisterTakeover) lets the eligible slave of a set in sync
// mode take a seat that is still held, when the master at the epoch the
// slave names does not answer a ping: one transaction, compared on the
// holder's lease and the set's revision, moves the seat to the slave's
// lease and gives the group a new set with no eligible slave. Every
// election writes the new epoch (nextEpoch) into the master's record and
// the set in the same transaction.

// takeoverPing bounds the ping of a master before its seat is given away.
const takeoverPing = 500 * time.Millisecond

// maxSeatAttempts bounds the compare-and-swap retries of one registration
// (heartbeats rewrite the seat concurrently).
const maxSeatAttempts = 4

// seatState is a group's master seat and eligible set as read from etcd.
type seatState struct {
	held   *brokerRecord
	heldKV *kvMeta
	set    *eligibleRecord
	setKV  *kvMeta
}

type kvMeta struct {
	createRev, modRev int64
	lease             clientv3.LeaseID
}

// readSeat reads group's master key and eligible set in one transaction.
func (s *Server) readSeat(ctx context.Context, group string) (seatState, error) {
	tctx, cancel := s.store.ctx(ctx)
	defer cancel()
	resp, err := s.etcd.Txn(tctx).Then(clientv3.OpGet(s.keys.broker(group, protocol.RoleMaster)), clientv3.OpGet(s.keys.eligible(group))).Commit()
	if err != nil {
		return seatState{}, unavailable(etcdErr("read master seat", err))
	}
	var st seatState
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		var r brokerRecord
		if err := json.Unmarshal(kvs[0].Value, &r); err == nil {
			st.held = &r
			st.heldKV = &kvMeta{kvs[0].CreateRevision, kvs[0].ModRevision, clientv3.LeaseID(kvs[0].Lease)}
		}
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		var r eligibleRecord
		if err := json.Unmarshal(kvs[0].Value, &r); err == nil {
			st.set = &r
		}
		st.setKV = &kvMeta{kvs[0].CreateRevision, kvs[0].ModRevision, clientv3.LeaseID(kvs[0].Lease)}
	}
	return st, nil
}

// setGuard compares the eligible set as read (absent or at its revision).
func (s *Server) setGuard(group string, st seatState) clientv3.Cmp {
	k := s.keys.eligible(group)
	if st.setKV == nil {
		return clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
	}
	return clientv3.Compare(clientv3.ModRevision(k), "=", st.setKV.modRev)
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain records always encode
	}
	return string(b)
}

// setFlags describes set for broker id in a register or eligible response.
func setFlags(set *eligibleRecord, id string) (uint8, string) {
	if set == nil {
		return 0, ""
	}
	flags := protocol.RegisterHasSet
	if set.Sync {
		flags |= protocol.RegisterSyncSet
	}
	if set.Slave != "" && set.Slave == id {
		flags |= protocol.RegisterEligible
	}
	if set.Master == "" {
		flags |= protocol.RegisterReleased
	}
	if id != "" && set.Master == id {
		flags |= protocol.RegisterOwnSet
	}
	return flags, set.Slave
}

// viewSetFlags is setFlags over the view's set of group.
func (s *Server) viewSetFlags(group, id string) (uint8, string) {
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	if e, ok := s.view.eligible[group]; ok {
		r := e.rec
		return setFlags(&r, id)
	}
	return 0, ""
}

// registerMaster writes a master registration: a heartbeat of the seat's
// holder, or an election (a free seat, or a takeover).
func (s *Server) registerMaster(ctx context.Context, req protocol.RegisterRequest, rec brokerRecord, lease clientv3.LeaseID, fresh bool) (protocol.RegisterResponse, error) {
	sync := req.Flags&protocol.RegisterSync != 0
	for attempt := 0; attempt < maxSeatAttempts; attempt++ {
		st, err := s.readSeat(ctx, req.Group)
		if err != nil {
			return protocol.RegisterResponse{}, err
		}
		var resp protocol.RegisterResponse
		var done bool
		switch {
		case st.held != nil && st.held.BrokerID == req.BrokerID:
			resp, done, err = s.renewSeat(ctx, req, rec, lease, st, sync)
		case st.held != nil && req.Flags&protocol.RegisterTakeover != 0:
			resp, done, err = s.takeover(ctx, req, rec, lease, st, sync)
		case st.held != nil:
			err = protocol.Errorf(protocol.StatusNotMaster, fmt.Sprintf("group %s has a live master: broker %s at %s (epoch %d)",
				req.Group, st.held.BrokerID, st.held.Address, st.held.Epoch))
		default:
			resp, done, err = s.elect(ctx, req, rec, lease, st, sync)
		}
		if err != nil {
			if fresh {
				_ = s.revoke(ctx, lease)
			}
			return protocol.RegisterResponse{}, err
		}
		if done {
			if fresh {
				s.lg.Info("broker registered", zap.String("group", req.Group), zap.Stringer("role", req.Role),
					zap.Stringer("kind", req.Kind), zap.String("broker", req.BrokerID), zap.String("address", req.Address),
					zap.Int64("lease", int64(lease)), zap.Uint64("epoch", resp.Epoch))
			}
			return resp, nil
		}
		// The seat moved between the read and the write: read again.
	}
	if fresh {
		_ = s.revoke(ctx, lease)
	}
	return protocol.RegisterResponse{}, protocol.Errorf(protocol.StatusUnavailable,
		fmt.Sprintf("group %s: the master seat kept changing; retry", req.Group))
}

// renewSeat rewrites the holder's own registration (a heartbeat whose
// record changed, or a restart with the same broker id), keeping its epoch;
// it records the eligible set's mode and address when they changed (and
// creates the set of a group that has none).
func (s *Server) renewSeat(ctx context.Context, req protocol.RegisterRequest, rec brokerRecord, lease clientv3.LeaseID, st seatState, sync bool) (protocol.RegisterResponse, bool, error) {
	key := s.keys.broker(req.Group, protocol.RoleMaster)
	rec.Epoch = st.held.Epoch
	if rec.Epoch == 0 {
		rec.Epoch = uint64(st.heldKV.createRev)
	}
	rec.RegisteredAt = st.held.RegisteredAt
	ops := []clientv3.Op{clientv3.OpPut(key, mustJSON(rec), clientv3.WithLease(lease))}
	set := st.set
	if set == nil || set.Master == req.BrokerID && (set.Sync != sync || set.MasterAddr != req.Address) {
		n := eligibleRecord{Master: req.BrokerID, MasterAddr: req.Address, Sync: sync, Epoch: rec.Epoch, UpdatedAt: time.Now().UTC()}
		if set != nil {
			n.Slave, n.Epoch = set.Slave, max(set.Epoch, rec.Epoch)
		}
		set = &n
		ops = append(ops, clientv3.OpPut(s.keys.eligible(req.Group), mustJSON(n)))
	}
	tctx, cancel := s.store.ctx(ctx)
	defer cancel()
	resp, err := s.etcd.Txn(tctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", st.heldKV.modRev), s.setGuard(req.Group, st)).
		Then(ops...).Commit()
	if err != nil {
		return protocol.RegisterResponse{}, false, unavailable(etcdErr("register", err))
	}
	if !resp.Succeeded {
		return protocol.RegisterResponse{}, false, nil
	}
	flags, slave := setFlags(set, req.BrokerID)
	return protocol.RegisterResponse{LeaseID: int64(lease), TTL: s.opts.BrokerTTL, Version: uint64(resp.Header.Revision),
		Master: req.Address, Epoch: rec.Epoch, Flags: flags, EligibleSlave: slave}, true, nil
}

// mayElect says whether req's broker may take the free master seat of a
// group whose eligible set is set, and why not.
func (s *Server) mayElect(ctx context.Context, req protocol.RegisterRequest, set *eligibleRecord) (bool, string) {
	switch {
	case set == nil, set.Master == req.BrokerID:
		return true, ""
	case set.Master == "" && (set.Slave == "" || set.Slave == req.BrokerID):
		return true, ""
	case set.Slave == req.BrokerID:
		if s.answers(ctx, set.MasterAddr) {
			return false, fmt.Sprintf("group %s: its master %s at %s still answers: it keeps the group (its slave takes it only from a master that is gone)",
				req.Group, set.Master, set.MasterAddr)
		}
		return true, ""
	}
	slave := set.Slave
	if slave == "" {
		slave = "none"
	}
	return false, fmt.Sprintf("group %s belongs to broker %s (eligible slave: %s): only they may take it, or an admin's forced failover",
		req.Group, set.Master, slave)
}

// elect runs an election for a free master seat.
func (s *Server) elect(ctx context.Context, req protocol.RegisterRequest, rec brokerRecord, lease clientv3.LeaseID, st seatState, sync bool) (protocol.RegisterResponse, bool, error) {
	if ok, why := s.mayElect(ctx, req, st.set); !ok {
		s.failoverMetrics.elections.WithLabelValues("refused").Inc()
		return protocol.RegisterResponse{}, false, protocol.Errorf(protocol.StatusNotMaster, why)
	}
	rec.Epoch = nextEpoch(st, req)
	set := eligibleRecord{Master: req.BrokerID, MasterAddr: req.Address, Sync: sync, Epoch: rec.Epoch, UpdatedAt: time.Now().UTC()}
	if st.set != nil && st.set.Master == req.BrokerID {
		set.Slave = st.set.Slave // a lapsed lease won again: the slave holds what it held
	}
	key := s.keys.broker(req.Group, protocol.RoleMaster)
	tctx, cancel := s.store.ctx(ctx)
	defer cancel()
	resp, err := s.etcd.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0), s.setGuard(req.Group, st)).
		Then(clientv3.OpPut(key, mustJSON(rec), clientv3.WithLease(lease)), clientv3.OpPut(s.keys.eligible(req.Group), mustJSON(set))).
		Commit()
	if err != nil {
		return protocol.RegisterResponse{}, false, unavailable(etcdErr("register", err))
	}
	if !resp.Succeeded {
		return protocol.RegisterResponse{}, false, nil
	}
	out, err := s.won(ctx, req, rec, lease, resp.Header.Revision, &set)
	if err != nil {
		return out, false, err
	}
	outcome := "won"
	if st.set != nil && st.set.Master != req.BrokerID {
		outcome = "failover"
	}
	s.failoverMetrics.elections.WithLabelValues(outcome).Inc()
	s.lg.Info("master elected", zap.String("group", req.Group), zap.String("broker", req.BrokerID),
		zap.String("address", req.Address), zap.Uint64("epoch", out.Epoch), zap.String("eligible_slave", set.Slave))
	return out, true, nil
}

// takeover moves a held seat to the eligible slave of a sync-mode set whose
// master does not answer.
func (s *Server) takeover(ctx context.Context, req protocol.RegisterRequest, rec brokerRecord, lease clientv3.LeaseID, st seatState, sync bool) (protocol.RegisterResponse, bool, error) {
	refuse := func(why string) (protocol.RegisterResponse, bool, error) {
		s.failoverMetrics.takeovers.WithLabelValues("refused").Inc()
		return protocol.RegisterResponse{}, false, protocol.Errorf(protocol.StatusNotMaster, fmt.Sprintf(
			"group %s: no takeover from broker %s at %s (epoch %d): %s", req.Group, st.held.BrokerID, st.held.Address, st.held.Epoch, why))
	}
	switch set := st.set; {
	case set == nil || set.Slave != req.BrokerID:
		return refuse("this broker is not its eligible slave")
	case !set.Sync:
		return refuse("its eligible set is not in sync mode (an async slave waits for the master's lease)")
	case set.Master != st.held.BrokerID:
		return refuse("the eligible set belongs to another master")
	case req.Epoch != st.held.Epoch:
		return refuse(fmt.Sprintf("the slave follows epoch %d", req.Epoch))
	}
	if s.answers(ctx, st.held.Address) {
		return refuse("it answers")
	}
	key := s.keys.broker(req.Group, protocol.RoleMaster)
	rec.Epoch = nextEpoch(st, req)
	set := eligibleRecord{Master: req.BrokerID, MasterAddr: req.Address, Sync: sync, Epoch: rec.Epoch, UpdatedAt: time.Now().UTC()}
	tctx, cancel := s.store.ctx(ctx)
	defer cancel()
	resp, err := s.etcd.Txn(tctx).
		If(clientv3.Compare(clientv3.LeaseValue(key), "=", st.heldKV.lease), s.setGuard(req.Group, st)).
		Then(clientv3.OpPut(key, mustJSON(rec), clientv3.WithLease(lease)), clientv3.OpPut(s.keys.eligible(req.Group), mustJSON(set))).
		Commit()
	if err != nil {
		return protocol.RegisterResponse{}, false, unavailable(etcdErr("takeover", err))
	}
	if !resp.Succeeded {
		return protocol.RegisterResponse{}, false, nil
	}
	out, err := s.won(ctx, req, rec, lease, resp.Header.Revision, &set)
	if err != nil {
		return out, false, err
	}
	s.failoverMetrics.takeovers.WithLabelValues("ok").Inc()
	s.lg.Warn("takeover: the eligible slave took the group from a master that does not answer", zap.String("group", req.Group),
		zap.String("old_master", st.held.BrokerID), zap.Uint64("old_epoch", st.held.Epoch),
		zap.String("broker", req.BrokerID), zap.Uint64("epoch", out.Epoch))
	return out, true, nil
}

// nextEpoch is the epoch of an election won now: one more than the
// largest the group has known — its eligible set's last, its seat holder's
// (a takeover), and the winner's own (a slave's is the epoch it follows) —
// so epochs count elections, and stay above every epoch a broker keeps
// even where a set was lost or written before sets had epochs.
func nextEpoch(st seatState, req protocol.RegisterRequest) uint64 {
	last := req.Epoch
	if st.held != nil {
		last = max(last, st.held.Epoch)
	}
	if st.set != nil {
		last = max(last, st.set.Epoch)
	}
	return last + 1
}

// won answers an election won at revision rev, with the epoch in rec, and
// frees the slave seat the winner held.
func (s *Server) won(ctx context.Context, req protocol.RegisterRequest, rec brokerRecord, lease clientv3.LeaseID, rev int64, set *eligibleRecord) (protocol.RegisterResponse, error) {
	for cur := s.seatWritten.Load(); cur < rev && !s.seatWritten.CompareAndSwap(cur, rev); cur = s.seatWritten.Load() {
	}
	s.freeSlaveSeat(ctx, req)
	flags, slave := setFlags(set, req.BrokerID)
	return protocol.RegisterResponse{LeaseID: int64(lease), TTL: s.opts.BrokerTTL, Version: uint64(rev), Master: req.Address,
		Epoch: rec.Epoch, Flags: flags, EligibleSlave: slave}, nil
}

// answers reports whether a broker answers a ping at addr within
// takeoverPing (a connection of its own, so no breaker state of the relay
// client decides).
func (s *Server) answers(ctx context.Context, addr string) bool {
	if addr == "" {
		return false
	}
	tr, err := transport.New(transport.Options{DialTimeout: takeoverPing, RequestTimeout: takeoverPing}, nil)
	if err != nil {
		return true // cannot tell: assume it lives
	}
	defer tr.Close()
	pctx, cancel := context.WithTimeout(ctx, takeoverPing)
	defer cancel()
	_, err = tr.Call(pctx, addr, protocol.CmdPing, nil)
	return err == nil
}

// releaseSet hands the group to its eligible slave when its master leaves
// cleanly (RegisterLeaving): the set's master becomes "" so the slave may
// take the seat at once, without a ping. A master without an eligible
// slave keeps its set: nobody else may take its group. cur is the leaving
// master's registration.
func (s *Server) releaseSet(ctx context.Context, group string, cur brokerRecord) error {
	for attempt := 0; attempt < maxSeatAttempts; attempt++ {
		st, err := s.readSeat(ctx, group)
		if err != nil {
			return err
		}
		if st.held == nil || st.held.BrokerID != cur.BrokerID || st.set == nil || st.set.Master != cur.BrokerID || st.set.Slave == "" {
			return nil
		}
		n := *st.set
		n.Master, n.UpdatedAt = "", time.Now().UTC()
		key := s.keys.broker(group, protocol.RoleMaster)
		tctx, cancel := s.store.ctx(ctx)
		resp, err := s.etcd.Txn(tctx).
			If(clientv3.Compare(clientv3.LeaseValue(key), "=", st.heldKV.lease), s.setGuard(group, st)).
			Then(clientv3.OpPut(s.keys.eligible(group), mustJSON(n))).Commit()
		cancel()
		if err != nil {
			return unavailable(etcdErr("release the eligible set", err))
		}
		if resp.Succeeded {
			s.lg.Info("master released its group to its eligible slave", zap.String("group", group), zap.String("master", cur.BrokerID),
				zap.String("slave", n.Slave))
			return nil
		}
	}
	return protocol.Errorf(protocol.StatusUnavailable, "group "+group+": the eligible set kept changing; retry")
}

// setEligible serves CmdEligible: the group's master at its epoch records
// its eligible slave (or none) and the set's mode.
func (s *Server) setEligible(ctx context.Context, q protocol.EligibleRequest) (protocol.EligibleResponse, error) {
	if !protocol.IsName(q.Group) {
		return protocol.EligibleResponse{}, protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("group %q must be A-Z a-z 0-9 . _ -", q.Group))
	}
	key := s.keys.broker(q.Group, protocol.RoleMaster)
	for attempt := 0; attempt < maxSeatAttempts; attempt++ {
		st, err := s.readSeat(ctx, q.Group)
		if err != nil {
			return protocol.EligibleResponse{}, err
		}
		if st.held == nil {
			// Its lease lapsed: its registration wins the seat again (or
			// learns another broker did) at its next heartbeat.
			return protocol.EligibleResponse{}, protocol.Errorf(protocol.StatusStaleEpoch, fmt.Sprintf(
				"group %s has no registered master: broker %s registers again first", q.Group, q.BrokerID))
		}
		if st.held.BrokerID == q.BrokerID && st.held.Epoch != q.Epoch {
			// Its own seat at another epoch (it won again after its lease
			// lapsed): the request is older than its registration.
			return protocol.EligibleResponse{}, protocol.Errorf(protocol.StatusStaleEpoch, fmt.Sprintf(
				"group %s: broker %s is its master at epoch %d, not %d", q.Group, q.BrokerID, st.held.Epoch, q.Epoch))
		}
		if st.held.BrokerID != q.BrokerID {
			return protocol.EligibleResponse{}, protocol.Errorf(protocol.StatusNotMaster, fmt.Sprintf(
				"group %s: broker %s is not its master at epoch %d (broker %s at epoch %d is)", q.Group, q.BrokerID, q.Epoch,
				st.held.BrokerID, st.held.Epoch))
		}
		n := eligibleRecord{Master: q.BrokerID, MasterAddr: st.held.Address, Slave: q.Slave, Sync: q.Flags&protocol.RegisterSync != 0,
			Epoch: st.held.Epoch, UpdatedAt: time.Now().UTC()}
		if st.set != nil {
			n.Epoch = max(n.Epoch, st.set.Epoch)
		}
		if st.set != nil && st.set.Master == n.Master && st.set.MasterAddr == n.MasterAddr && st.set.Slave == n.Slave && st.set.Sync == n.Sync {
			flags, slave := setFlags(st.set, "")
			return protocol.EligibleResponse{Flags: flags, Slave: slave}, nil
		}
		tctx, cancel := s.store.ctx(ctx)
		resp, err := s.etcd.Txn(tctx).
			If(clientv3.Compare(clientv3.LeaseValue(key), "=", st.heldKV.lease), s.setGuard(q.Group, st)).
			Then(clientv3.OpPut(s.keys.eligible(q.Group), mustJSON(n))).Commit()
		cancel()
		if err != nil {
			return protocol.EligibleResponse{}, unavailable(etcdErr("eligible set", err))
		}
		if resp.Succeeded {
			was := ""
			if st.set != nil {
				was = st.set.Slave
			}
			s.lg.Info("eligible set changed", zap.String("group", q.Group), zap.String("master", q.BrokerID), zap.Uint64("epoch", q.Epoch),
				zap.String("slave", n.Slave), zap.String("was", was), zap.Bool("sync", n.Sync))
			s.failoverMetrics.setChanges.WithLabelValues(setChange(was, n.Slave)).Inc()
			flags, slave := setFlags(&n, "")
			return protocol.EligibleResponse{Flags: flags, Slave: slave}, nil
		}
	}
	return protocol.EligibleResponse{}, protocol.Errorf(protocol.StatusUnavailable, "group "+q.Group+": the eligible set kept changing; retry")
}

func setChange(was, now string) string {
	switch {
	case was == now:
		return "mode"
	case now == "":
		return "shrink"
	}
	return "add"
}

// serveEligible answers CmdEligible (off the event loop: it writes etcd).
func (s *Server) serveEligible(r *netserver.Request) {
	q, err := protocol.DecodeEligibleRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if p := s.tcpPrincipal(r); p == nil || !p.IsBrokerOf(q.Group) {
		s.refuseTCP(r, p, "record the eligible set of group "+q.Group)
		return
	}
	go func() {
		resp, err := s.setEligible(context.Background(), q)
		if err != nil {
			r.ReplyError(err)
			return
		}
		r.Reply(protocol.StatusOK, protocol.AppendEligibleResponse(nil, &resp))
	}()
}

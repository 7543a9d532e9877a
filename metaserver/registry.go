package metaserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// registerBroker serves a broker's CmdRegister: the first one grants a lease
// and writes the registration on it; later ones keep the lease alive and
// rewrite the registration when its state, address or load changed. Any meta
// server can serve any heartbeat: the lease id travels with the request and
// is stored in the registration. A master registration is the group's
// election (election.go).
func (s *Server) registerBroker(ctx context.Context, req protocol.RegisterRequest) (protocol.RegisterResponse, error) {
	if err := checkRegister(&req); err != nil {
		return protocol.RegisterResponse{}, err
	}
	key := s.keys.broker(req.Group, req.Role)
	bk := brokerKey{req.Group, req.Role}
	s.view.mu.RLock()
	cur, known := s.view.brokers[bk]
	holder, hasMaster := s.view.brokers[brokerKey{req.Group, protocol.RoleMaster}]
	seen := s.view.rev // the revision cur was read at
	s.view.mu.RUnlock()
	if req.Role == protocol.RoleSlave && hasMaster && holder.rec.BrokerID == req.BrokerID && req.Flags&protocol.RegisterLeaving == 0 {
		// A promoted slave's last slave heartbeat must not take the seat
		// back from the old master: it is told it holds the master seat
		// (an election it asked for may have won without its answer) and
		// nothing is written.
		flags, slave := s.viewSetFlags(req.Group, req.BrokerID)
		return protocol.RegisterResponse{LeaseID: req.LeaseID, TTL: s.opts.BrokerTTL, Version: s.version(), Master: holder.rec.Address,
			Epoch: holder.rec.Epoch, Flags: flags, EligibleSlave: slave}, nil
	}
	mine := known && cur.rec.BrokerID == req.BrokerID
	master := req.Role == protocol.RoleMaster

	if req.Flags&protocol.RegisterLeaving != 0 {
		if mine {
			if master {
				// A clean leave hands the group to its eligible slave.
				if err := s.releaseSet(ctx, req.Group, cur.rec); err != nil {
					return protocol.RegisterResponse{}, err
				}
			}
			if err := s.revoke(ctx, clientv3.LeaseID(cur.rec.LeaseID)); err != nil {
				return protocol.RegisterResponse{}, err
			}
			s.lg.Info("broker left", zap.String("group", req.Group), zap.Stringer("role", req.Role), zap.String("broker", req.BrokerID))
		}
		return protocol.RegisterResponse{Version: s.version()}, nil
	}

	lease := clientv3.LeaseID(req.LeaseID)
	if lease == 0 && mine {
		lease = clientv3.LeaseID(cur.rec.LeaseID)
	}
	if lease != 0 {
		alive, err := s.keepAliveOnce(ctx, lease)
		if err != nil {
			return protocol.RegisterResponse{}, err
		}
		if !alive {
			lease = 0
		}
	}
	fresh := lease == 0
	if fresh {
		var err error
		if lease, err = s.grant(ctx, s.opts.BrokerTTL); err != nil {
			return protocol.RegisterResponse{}, err
		}
	}
	rec := brokerRecord{
		Group: req.Group, Role: req.Role, Kind: req.Kind, State: req.State, BrokerID: req.BrokerID,
		Address: req.Address, LeaseID: int64(lease), Load: req.Load, RegisteredAt: time.Now().UTC(),
		WriteState: req.WriteState, WriteReason: req.WriteReason,
	}
	if !master {
		rec.Epoch = req.Epoch
	}
	if mine {
		rec.RegisteredAt = cur.rec.RegisteredAt
		if master && !fresh {
			rec.Epoch = cur.rec.Epoch // the key lives on: same election
		}
		// A heartbeat that changes nothing is answered from the view, unless
		// this server wrote a seat change the view had not caught up with
		// when cur was read (a takeover or election a moment ago: cur could
		// still be the deposed master); then etcd decides (registerMaster).
		// The revision compared is cur's own snapshot's: the view may catch
		// up during the keep-alive above, after cur was read.
		if !fresh && rec == cur.rec && (!master || rec.Epoch != 0) && req.Flags&protocol.RegisterTakeover == 0 &&
			(!master || seen >= s.seatWritten.Load()) {
			addr, epoch := s.masterOf(req, rec.Epoch)
			flags, slave := s.viewSetFlags(req.Group, req.BrokerID)
			return protocol.RegisterResponse{LeaseID: int64(lease), TTL: s.opts.BrokerTTL, Version: s.version(), Master: addr, Epoch: epoch,
				Flags: flags, EligibleSlave: slave}, nil
		}
	}
	if master {
		return s.registerMaster(ctx, req, rec, lease, fresh)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return protocol.RegisterResponse{}, err
	}
	// Create the registration unless another broker holds the slave seat;
	// the same broker (a heartbeat, or a restart with the same id)
	// overwrites its own.
	tctx, cancel := s.store.ctx(ctx)
	defer cancel()
	resp, err := s.etcd.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b), clientv3.WithLease(lease))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return protocol.RegisterResponse{}, unavailable(etcdErr("register", err))
	}
	rev := resp.Header.Revision
	if !resp.Succeeded {
		var held brokerRecord
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			_ = json.Unmarshal(kvs[0].Value, &held)
		}
		if held.BrokerID != req.BrokerID {
			if fresh {
				_ = s.revoke(ctx, lease)
			}
			return protocol.RegisterResponse{}, protocol.Errorf(protocol.StatusInvalid,
				fmt.Sprintf("group %s already has a live %s: broker %s at %s", req.Group, req.Role, held.BrokerID, held.Address))
		}
		if !mine {
			rec.RegisteredAt = held.RegisteredAt
		}
		b, _ = json.Marshal(rec)
		pctx, pcancel := s.store.ctx(ctx)
		defer pcancel()
		presp, err := s.etcd.Put(pctx, key, string(b), clientv3.WithLease(lease))
		if err != nil {
			return protocol.RegisterResponse{}, unavailable(etcdErr("register", err))
		}
		rev = presp.Header.Revision
	}
	addr, epoch := s.masterOf(req, rec.Epoch)
	flags, slave := s.viewSetFlags(req.Group, req.BrokerID)
	out := protocol.RegisterResponse{LeaseID: int64(lease), TTL: s.opts.BrokerTTL, Version: uint64(rev), Master: addr, Epoch: epoch,
		Flags: flags, EligibleSlave: slave}
	if fresh {
		s.lg.Info("broker registered", zap.String("group", req.Group), zap.Stringer("role", req.Role),
			zap.Stringer("kind", req.Kind), zap.String("broker", req.BrokerID), zap.String("address", req.Address),
			zap.Int64("lease", int64(lease)))
	}
	return out, nil
}

// masterOf returns the address and epoch of req's group's live master: the
// broker's own (epoch: its registration's) for a master, the view's for a
// slave.
func (s *Server) masterOf(req protocol.RegisterRequest, epoch uint64) (string, uint64) {
	if req.Role == protocol.RoleMaster {
		return req.Address, epoch
	}
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	if e, ok := s.view.brokers[brokerKey{req.Group, protocol.RoleMaster}]; ok {
		return e.rec.Address, e.rec.Epoch
	}
	return "", 0
}

// putBroker writes rec at key on lease and returns the revision.
func (s *Server) putBroker(ctx context.Context, key string, rec brokerRecord, lease clientv3.LeaseID) (int64, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	pctx, cancel := s.store.ctx(ctx)
	defer cancel()
	resp, err := s.etcd.Put(pctx, key, string(b), clientv3.WithLease(lease))
	if err != nil {
		return 0, unavailable(etcdErr("register", err))
	}
	return resp.Header.Revision, nil
}

// freeSlaveSeat deletes req's group's slave registration if req's broker
// holds it (it was just elected master). Best effort: the seat frees itself
// when that lease expires anyway.
func (s *Server) freeSlaveSeat(ctx context.Context, req protocol.RegisterRequest) {
	s.view.mu.RLock()
	e, ok := s.view.brokers[brokerKey{req.Group, protocol.RoleSlave}]
	s.view.mu.RUnlock()
	if !ok || e.rec.BrokerID != req.BrokerID {
		return
	}
	key := s.keys.broker(req.Group, protocol.RoleSlave)
	dctx, cancel := s.store.ctx(ctx)
	defer cancel()
	_, err := s.etcd.Txn(dctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", e.modRev)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		s.lg.Warn("cannot free the slave seat of a promoted slave", zap.String("group", req.Group), zap.Error(err))
	}
}

func checkRegister(r *protocol.RegisterRequest) error {
	if r.State == 0 {
		r.State = protocol.GroupReadWrite
	}
	switch {
	case r.Kind != protocol.KindRealtime && r.Kind != protocol.KindDelay:
		return protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("unknown broker kind %d", r.Kind))
	case r.Role != protocol.RoleMaster && r.Role != protocol.RoleSlave:
		return protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("unknown broker role %d", r.Role))
	case r.State != protocol.GroupReadWrite && r.State != protocol.GroupReadonly:
		return protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("a broker may report rw or readonly, not %v", r.State))
	case !protocol.IsName(r.Group):
		return protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("group %q must be A-Z a-z 0-9 . _ -", r.Group))
	}
	if err := protocol.CheckConsumerID(r.BrokerID); err != nil {
		return protocol.Errorf(protocol.StatusInvalid, "broker id: "+err.Error())
	}
	if _, _, err := net.SplitHostPort(r.Address); err != nil || r.Address == "" {
		return protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("address %q is not host:port", r.Address))
	}
	return nil
}

// clientHeartbeat serves CmdClientHeartbeat: a consumer's registration lives
// on its own lease of ClientTTL, kept alive by each heartbeat.
func (s *Server) clientHeartbeat(ctx context.Context, req protocol.ClientHeartbeatRequest) (protocol.ClientHeartbeatResponse, error) {
	subject := protocol.RealSubject(req.Subject)
	if err := s.limits.CheckSubject(subject); err != nil {
		return protocol.ClientHeartbeatResponse{}, err
	}
	if err := s.limits.CheckGroup(req.Group); err != nil {
		return protocol.ClientHeartbeatResponse{}, err
	}
	if err := protocol.CheckConsumerID(req.ClientID); err != nil {
		return protocol.ClientHeartbeatResponse{}, err
	}
	if req.ClientType != protocol.ClientConsumer {
		return protocol.ClientHeartbeatResponse{}, protocol.Errorf(protocol.StatusInvalid, "only consumers heartbeat, not "+req.ClientType.String())
	}
	ck := consumerKey{subject, req.Group, req.ClientID}
	key := s.keys.consumer(ck.subject, ck.group, ck.clientID)
	s.view.mu.RLock()
	cur, known := s.view.consumers[ck]
	_, offline := s.view.offline[ck]
	s.view.mu.RUnlock()
	var flags uint8
	if offline {
		flags |= protocol.LookupConsumerOffline
	}

	if req.Flags&protocol.ClientLeaving != 0 {
		if known {
			if err := s.revoke(ctx, clientv3.LeaseID(cur.LeaseID)); err != nil {
				return protocol.ClientHeartbeatResponse{}, err
			}
		}
		return protocol.ClientHeartbeatResponse{Flags: flags}, nil
	}
	lease := clientv3.LeaseID(req.LeaseID)
	if lease == 0 && known {
		lease = clientv3.LeaseID(cur.LeaseID)
	}
	if lease != 0 {
		alive, err := s.keepAliveOnce(ctx, lease)
		if err != nil {
			return protocol.ClientHeartbeatResponse{}, err
		}
		if !alive {
			lease = 0
		}
	}
	fresh := lease == 0
	if fresh {
		var err error
		if lease, err = s.grant(ctx, s.opts.ClientTTL); err != nil {
			return protocol.ClientHeartbeatResponse{}, err
		}
	}
	if fresh || !known || cur.LeaseID != int64(lease) {
		rec := consumerRecord{ClientType: req.ClientType, LeaseID: int64(lease), Since: time.Now().UTC()}
		if known {
			rec.Since = cur.Since
		}
		if _, err := s.store.putJSON(ctx, key, rec, lease); err != nil {
			return protocol.ClientHeartbeatResponse{}, unavailable(err)
		}
	}
	return protocol.ClientHeartbeatResponse{LeaseID: int64(lease), TTL: s.opts.ClientTTL, Flags: flags}, nil
}

// keepAliveOnce renews lease; it reports false when etcd no longer knows it
// (it expired), and an error when etcd cannot be reached.
func (s *Server) keepAliveOnce(ctx context.Context, lease clientv3.LeaseID) (bool, error) {
	ctx, cancel := s.store.ctx(ctx)
	defer cancel()
	_, err := s.etcd.KeepAliveOnce(ctx, lease)
	if err == nil {
		return true, nil
	}
	// An expired lease fails KeepAliveOnce; TimeToLive tells that apart
	// from etcd being unreachable (it answers TTL -1 for an unknown lease).
	ttl, terr := s.etcd.TimeToLive(ctx, lease)
	if terr == nil && ttl.TTL == -1 {
		return false, nil
	}
	return false, unavailable(etcdErr("keep lease alive", err))
}

func (s *Server) grant(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	ctx, cancel := s.store.ctx(ctx)
	defer cancel()
	g, err := s.etcd.Grant(ctx, int64((ttl+time.Second-1)/time.Second))
	if err != nil {
		return 0, unavailable(etcdErr("grant lease", err))
	}
	return g.ID, nil
}

func (s *Server) revoke(ctx context.Context, lease clientv3.LeaseID) error {
	ctx, cancel := s.store.ctx(ctx)
	defer cancel()
	if _, err := s.etcd.Revoke(ctx, lease); err != nil {
		if ttl, terr := s.etcd.TimeToLive(ctx, lease); terr == nil && ttl.TTL == -1 {
			return nil // already gone
		}
		return unavailable(etcdErr("revoke lease", err))
	}
	return nil
}

// unavailable turns an etcd failure into a StatusUnavailable protocol error
// (clients retry elsewhere or later).
func unavailable(err error) error {
	if err == nil {
		return nil
	}
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return err
	}
	return fmt.Errorf("%w", &protocol.Error{Status: protocol.StatusUnavailable, Message: err.Error()})
}

// version is the revision of the view, for responses.
func (s *Server) version() uint64 {
	rev, _ := s.view.revision()
	return uint64(rev)
}

package delay

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// roleCheckEvery is how often roleLoop checks the registrations: the
// fence reacts within it, well inside FenceMargin.
const roleCheckEvery = 50 * time.Millisecond

// roles keeps the server registered with the meta servers in its current
// role and changes the role when the group's election says so (see
// "Failover" in the package documentation). roleLoop owns the
// registrations and is the only goroutine that changes the server's role.
type roles struct {
	s  *Server
	lg *zap.Logger

	masterReg *metaclient.Registration // owned by roleLoop
	slaveReg  atomic.Pointer[metaclient.Registration]
	nextTry   time.Time
	backoff   time.Duration
	switchCh  chan *switchReq // a planned handover for the master (one at a time)

	stop chan struct{}
	done chan struct{}
}

func newRoles(s *Server) *roles {
	return &roles{s: s, lg: s.lg.Named("roles"), switchCh: make(chan *switchReq, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

func (r *roles) start() { go r.roleLoop() }

// close stops roleLoop and unregisters (until ctx ends).
func (r *roles) close(ctx context.Context) error {
	close(r.stop)
	<-r.done
	var errs []error
	if r.masterReg != nil {
		errs = append(errs, r.masterReg.Close(ctx))
	}
	if reg := r.slaveReg.Swap(nil); reg != nil {
		errs = append(errs, reg.Close(ctx))
	}
	return errors.Join(errs...)
}

func (r *roles) roleLoop() {
	defer close(r.done)
	t := time.NewTicker(roleCheckEvery)
	defer t.Stop()
	for {
		r.check()
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
	}
}

// broker describes this server to the meta servers in role.
func (r *roles) broker(role protocol.BrokerRole) metaclient.Broker {
	s := r.s
	return metaclient.Broker{Kind: protocol.KindDelay, Role: role, Group: s.opts.Group, BrokerID: s.opts.BrokerID,
		Address: s.advertised(), Report: s.report}
}

// register tries one registration in role, no more often than the back-off
// allows; nil without an error means not yet.
func (r *roles) register(role protocol.BrokerRole) (*metaclient.Registration, error) {
	if time.Now().Before(r.nextTry) {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	reg, err := metaclient.Register(ctx, r.s.opts.MetaServers, r.broker(role), metaclient.WithLogger(r.lg),
		metaclient.WithRequestTimeout(time.Second))
	if err != nil {
		r.backoff = min(max(2*r.backoff, 100*time.Millisecond), 2*time.Second)
		r.nextTry = time.Now().Add(r.backoff)
		return nil, err
	}
	r.backoff, r.nextTry = 0, time.Time{}
	return reg, nil
}

// check is one turn of roleLoop.
func (r *roles) check() {
	s := r.s
	m, sl := s.current()
	switch {
	case m != nil:
		r.checkMaster(m)
	case sl != nil:
		select {
		case req := <-r.switchCh:
			req.reply(protocol.Errorf(protocol.StatusNotMaster, "delay group "+s.opts.Group+": this server is no longer the master"))
		default:
		}
		r.checkSlave(sl)
	}
}

// checkMaster registers a master, fences it when its registration was not
// renewed in time, and demotes it when another server won the group.
func (r *roles) checkMaster(m *master) {
	s := r.s
	select {
	case req := <-r.switchCh:
		if r.masterReg == nil {
			req.reply(protocol.Errorf(protocol.StatusUnavailable, "delay group "+s.opts.Group+": not registered as master yet"))
			return
		}
		r.switchover(m, req)
		return
	default:
	}
	if r.masterReg == nil {
		reg, err := r.register(protocol.RoleMaster)
		switch {
		case err == nil && reg != nil:
			r.masterReg = reg
			m.epoch.Store(reg.Epoch())
			m.fenced.Store(false)
			r.lg.Info("registered as the group's master", zap.Uint64("epoch", reg.Epoch()))
		case errors.Is(err, protocol.ErrNotMaster) && s.opts.Failover:
			r.lg.Warn("another server is the group's master: rejoining as its slave", zap.Error(err))
			r.demote(m)
		case errors.Is(err, protocol.ErrNotMaster):
			m.fenced.Store(true)
			r.lg.Error("another server is the group's master; without failover this one takes nothing until it holds the group", zap.Error(err))
		case err != nil:
			r.lg.Warn("cannot register as the group's master; retrying", zap.Error(err))
		}
		return
	}
	reg := r.masterReg
	if e := reg.Epoch(); e != 0 {
		m.epoch.Store(e)
	}
	if errors.Is(reg.Err(), protocol.ErrNotMaster) {
		if !s.opts.Failover {
			m.fenced.Store(true) // another server holds the group
			return
		}
		r.lg.Warn("deposed: another server is the group's master; rejoining as its slave", zap.Error(reg.Err()))
		r.demote(m)
		return
	}
	if !s.opts.Failover {
		m.fenced.Store(false)
		return
	}
	m.leaseUntil.Store(reg.RenewedAt().Add(reg.TTL()).UnixNano())
	fenced := time.Since(reg.RenewedAt()) > reg.TTL()-fenceMargin(s.opts.FenceMargin, reg.TTL())
	if was := m.fenced.Swap(fenced); was != fenced {
		r.lg.Warn("fence", zap.Bool("fenced", fenced), zap.Time("renewed_at", reg.RenewedAt()), zap.Duration("ttl", reg.TTL()),
			zap.Error(reg.Err()))
	}
}

// fenceMargin is FenceMargin, at most a quarter of the TTL: a heartbeat is
// sent every third of the TTL, so a smaller share would fence a healthy
// master whenever one heartbeat is slow.
func fenceMargin(margin, ttl time.Duration) time.Duration { return min(margin, ttl/4) }

// checkSlave registers a slave, tells its copier the master's epoch, and
// runs for the group when the meta servers name no live master.
func (r *roles) checkSlave(sl *slave) {
	s := r.s
	reg := r.slaveReg.Load()
	if reg == nil {
		reg, err := r.register(protocol.RoleSlave)
		if err != nil {
			r.lg.Warn("cannot register as the group's slave; retrying", zap.Error(err))
		}
		if reg != nil {
			r.slaveReg.Store(reg)
			sl.epoch.Store(reg.Epoch())
		}
		return
	}
	if e := reg.Epoch(); e != 0 {
		sl.epoch.Store(e)
	}
	// Run only with a copy of a master's store: a slave that never copied
	// anything must not win the group (the master's messages would be
	// dropped when it rejoins).
	if !s.opts.Failover || !reg.Healthy() || reg.Master() != "" || !sl.synced.Load() {
		return
	}
	mreg, err := r.register(protocol.RoleMaster)
	switch {
	case errors.Is(err, protocol.ErrNotMaster):
		return // another server won
	case err != nil:
		r.lg.Warn("cannot run for the group's master; retrying", zap.Error(err))
		return
	case mreg == nil:
		return
	}
	r.lg.Warn("the group has no live master: promoted", zap.Uint64("epoch", mreg.Epoch()))
	r.promote(sl, mreg)
}

// promote turns the slave into the master the election made it: copying
// stops, the copy becomes a master's store, and the master starts.
func (r *roles) promote(sl *slave, reg *metaclient.Registration) {
	s := r.s
	s.mu.Lock()
	s.slave = nil
	s.mu.Unlock()
	sl.stop()
	if err := sl.replica.Promote(); err != nil {
		r.lg.Error("cannot promote the copy; giving the group up", zap.Error(err))
		r.giveUp(reg)
		r.reopenSlave()
		return
	}
	m, err := openMaster(s)
	if err != nil {
		r.lg.Error("cannot open the promoted store; giving the group up", zap.Error(err))
		r.giveUp(reg)
		r.reopenSlave()
		return
	}
	m.epoch.Store(reg.Epoch())
	m.fenced.Store(false)
	r.masterReg = reg
	if old := r.slaveReg.Swap(nil); old != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = old.Close(ctx) // the meta server freed the slave seat already
		cancel()
	}
	s.mu.Lock()
	s.master = m
	s.mu.Unlock()
	m.start()
	st := m.store.Stats()
	r.lg.Info("serving as the group's master", zap.Uint64("epoch", reg.Epoch()), zap.Int64("pending", st.Pending))
}

// demote closes the master (no sends, no forwards), unregisters it, and
// reopens the data directory as a slave's copy: the copy is dropped on the
// first sync (it may hold what the new master never had) and copied again.
func (r *roles) demote(m *master) {
	s := r.s
	m.fenced.Store(true)
	s.mu.Lock()
	s.master = nil
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	if err := m.close(ctx); err != nil {
		r.lg.Warn("closing the deposed master", zap.Error(err))
	}
	cancel()
	if r.masterReg != nil {
		r.giveUp(r.masterReg)
		r.masterReg = nil
	}
	r.reopenSlave()
}

func (r *roles) giveUp(reg *metaclient.Registration) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = reg.Close(ctx)
}

func (r *roles) reopenSlave() {
	s := r.s
	for {
		sl, err := openSlave(s)
		if err == nil {
			s.mu.Lock()
			s.slave = sl
			s.mu.Unlock()
			sl.start()
			return
		}
		r.lg.Error("cannot open the data directory as a slave's copy; retrying", zap.Error(err))
		select {
		case <-r.stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// report is what every heartbeat tells the meta servers: the state
// (readonly for a slave, a fenced master, or one whose slave lags under
// WaitSlave) and the load, with the replication lag.
func (s *Server) report() (protocol.GroupState, protocol.BrokerLoad) {
	m, sl := s.current()
	switch {
	case m != nil:
		st := m.store.Stats()
		in, out := s.metrics.rates.Update(int64(st.Appended), int64(st.Dispatched))
		b, d := m.src.lag()
		load := protocol.BrokerLoad{InPerSec: in, OutPerSec: out, StoredBytes: uint64(max(st.WALWritten, 0)),
			Pending: uint64(max(st.Pending, 0)), ReplicaLagBytes: uint64(max(b, 0)), ReplicaLagMillis: uint64(d.Milliseconds())}
		if m.src.acked.Load() < 0 {
			load.ReplicaLagBytes, load.ReplicaLagMillis = 0, 0 // no slave
		}
		// A fenced master is not reported readonly: a heartbeat that gets
		// through renews the lease and lifts the fence anyway.
		if m.src.readonly.Load() {
			return protocol.GroupReadonly, load
		}
		return protocol.GroupReadWrite, load
	case sl != nil:
		b, d := sl.lag()
		return protocol.GroupReadonly, protocol.BrokerLoad{Pending: uint64(max(sl.replica.Pending(), 0)),
			ReplicaLagBytes: uint64(max(b, 0)), ReplicaLagMillis: uint64(d.Milliseconds())}
	}
	return protocol.GroupReadonly, protocol.BrokerLoad{}
}

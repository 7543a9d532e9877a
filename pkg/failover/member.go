package failover

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// joinLag is how far behind a slave may be when its master starts counting
// on it: replies wait for it from then on (sync mode), so a slave further
// behind would stall them.
const joinLag = 250 * time.Millisecond

// setRetry is how long after a failed change of the eligible set the next
// one is tried.
const setRetry = 500 * time.Millisecond

// Member is one broker's life in its group (see the package
// documentation): roleLoop registers it with the meta servers in its role,
// keeps its master's write gate, maintains the eligible set, campaigns,
// takes over, promotes and demotes the server. roleLoop is the only
// goroutine that calls the Server's methods or changes the role.
type Member struct {
	opts Options
	srv  Server
	lg   *zap.Logger
	gate *Gate
	met  *memberMetrics

	master    atomic.Bool   // the role is master
	epoch     atomic.Uint64 // a master's epoch (a slave's: its registration's)
	state     atomic.Uint32 // the write state reported (protocol.WriteState)
	reason    atomic.Pointer[string]
	following atomic.Pointer[string]
	mreg      atomic.Pointer[metaclient.Registration] // set and cleared by roleLoop
	sreg      atomic.Pointer[metaclient.Registration]
	eligible  atomic.Pointer[string] // the eligible slave as this master knows it

	// Owned by roleLoop.
	set       string // the eligible slave as recorded ("" none)
	maybe     string // a slave a change without an answer may have recorded
	joining   bool   // sync: replies wait for joinID; recorded once it holds joinPoint
	joinID    string
	joinPoint int64
	nextSet   time.Time
	nextReg   time.Time
	backoff   time.Duration
	nextElect time.Time
	startedAt int64 // Now at Start
	termStart int64 // Now when this master's term began (registration, promotion)
	copyFrom  int64 // Now when copying last (re)started
	warnedAt  time.Time
	code      string

	switchCh chan *switchReq
	stop     chan struct{}
	done     chan struct{}
	started  bool
	closed   sync.Once
}

// New returns the member of srv in its group; Start runs it.
func New(opts Options, srv Server, lg *zap.Logger) (*Member, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.BrokerID == "" {
		opts.BrokerID = opts.Address
	}
	if lg == nil {
		lg = zap.NewNop()
	}
	gate := opts.Gate
	if gate == nil {
		gate = NewGate(opts.Group)
	}
	m := &Member{opts: opts, srv: srv, lg: lg.Named("failover"), gate: gate,
		switchCh: make(chan *switchReq), stop: make(chan struct{}), done: make(chan struct{})}
	empty := ""
	m.reason.Store(&empty)
	m.following.Store(&empty)
	m.eligible.Store(&empty)
	m.master.Store(opts.Role == protocol.RoleMaster)
	if m.master.Load() {
		m.gate.set(protocol.WriteFenced, 0, "not registered with the meta servers yet")
		m.state.Store(uint32(protocol.WriteFenced))
		m.code = "not-registered"
	}
	if opts.Registry != nil {
		m.met = newMemberMetrics(m, opts.Registry)
	}
	return m, nil
}

// Gate is the master's write gate (closed on a slave).
func (m *Member) Gate() *Gate { return m.gate }

// Master reports whether the server is its group's master now.
func (m *Member) Master() bool { return m.master.Load() }

// Epoch is the epoch the server serves in: a master's own, a slave's
// master's as its registration reports it (0: none yet).
func (m *Member) Epoch() uint64 {
	if m.master.Load() {
		return m.epoch.Load()
	}
	if r := m.sreg.Load(); r != nil {
		return r.Epoch()
	}
	return 0
}

// Following is the address of the master a slave copies from ("" none
// known yet).
func (m *Member) Following() string { return *m.following.Load() }

// WriteState returns the master's write state and why (WriteUnknown on a
// slave).
func (m *Member) WriteState() (protocol.WriteState, string) {
	if !m.master.Load() {
		return protocol.WriteUnknown, ""
	}
	return m.gate.State(), *m.reason.Load()
}

// EligibleSlave is the broker id of the master's eligible slave as it
// knows it ("" none).
func (m *Member) EligibleSlave() string { return *m.eligible.Load() }

// Lease returns when the master's registration was last renewed and its
// TTL (zero without one).
func (m *Member) Lease() (time.Time, time.Duration) {
	if r := m.mreg.Load(); r != nil {
		return r.RenewedAt(), r.TTL()
	}
	return time.Time{}, 0
}

// Start runs roleLoop.
func (m *Member) Start() {
	m.startedAt = Now()
	m.copyFrom = m.startedAt
	m.started = true
	go m.roleLoop()
}

// Close stops roleLoop. A master stops writes, waits (bounded by
// HandOverTimeout and half of ctx's time) until its slave holds everything
// and leaves its seat, releasing the group to its eligible slave; a slave
// unregisters. The server closes after.
func (m *Member) Close(ctx context.Context) error {
	var err error
	m.closed.Do(func() {
		if !m.started {
			return
		}
		close(m.stop)
		<-m.done
		if m.master.Load() {
			if reg := m.mreg.Load(); reg != nil {
				m.setState(protocol.WriteHandingOver, 0, "closing", "the master is closing: it hands the group to its slave")
				st := m.srv.Slave()
				if st.Connected && st.ID != "" && st.ID == m.set {
					wait := m.opts.HandOverTimeout
					if d, ok := ctx.Deadline(); ok {
						wait = min(wait, time.Until(d)/2)
					}
					hctx, cancel := context.WithTimeout(ctx, wait)
					if herr := m.srv.HandOver(hctx); herr != nil {
						m.lg.Warn("closing before the slave held everything", zap.Error(herr))
					}
					cancel()
				}
				err = reg.Close(ctx)
			}
		} else if reg := m.sreg.Load(); reg != nil {
			err = reg.Close(ctx)
		}
	})
	return err
}

func (m *Member) roleLoop() {
	defer close(m.done)
	t := time.NewTicker(m.opts.Tick)
	defer t.Stop()
	for {
		if m.master.Load() {
			m.masterTick()
		} else {
			m.slaveTick()
		}
		select {
		case <-m.stop:
			return
		case req := <-m.switchCh:
			m.switchover(req)
		case <-t.C:
		}
	}
}

// setState sets the gate and reports a change of the write state: a warn
// log with its reason, the metrics, and an early heartbeat.
func (m *Member) setState(s protocol.WriteState, until int64, code, detail string) {
	m.gate.set(s, until, detail)
	if protocol.WriteState(m.state.Load()) == s && m.code == code {
		return
	}
	was := protocol.WriteState(m.state.Load())
	m.state.Store(uint32(s))
	m.reason.Store(&detail)
	m.code = code
	m.lg.Warn("write state changed", zap.Stringer("state", s), zap.Stringer("was", was), zap.String("reason", code),
		zap.String("detail", detail), zap.Uint64("epoch", m.epoch.Load()))
	if m.met != nil {
		m.met.changes.WithLabelValues(s.String(), code).Inc()
	}
	if r := m.mreg.Load(); r != nil {
		r.Poke()
	}
}

// broker describes the server to the meta servers in role.
func (m *Member) broker(role protocol.BrokerRole, takeoverEpoch uint64) metaclient.Broker {
	b := metaclient.Broker{Kind: m.opts.Kind, Role: role, Group: m.opts.Group, BrokerID: m.opts.BrokerID, Address: m.opts.Address,
		TakeoverEpoch: takeoverEpoch}
	if role == protocol.RoleMaster {
		b.Sync = m.opts.WaitSlave
		b.Report = func() (protocol.GroupState, protocol.BrokerLoad) {
			if m.mreg.Load() == nil {
				// The registration that makes it the master: it serves
				// once it holds the seat.
				return protocol.GroupReadWrite, m.srv.Load()
			}
			if m.master.Load() && m.gate.State().Writes() {
				return protocol.GroupReadWrite, m.srv.Load()
			}
			return protocol.GroupReadonly, m.srv.Load()
		}
		b.WriteState = m.WriteState
	} else {
		b.Report = func() (protocol.GroupState, protocol.BrokerLoad) { return protocol.GroupReadonly, m.srv.Load() }
	}
	return b
}

// register registers the server in role (takeoverEpoch: a takeover of the
// master at that epoch), no more often than the back-off allows unless
// now is set; nil without an error means not yet.
func (m *Member) register(role protocol.BrokerRole, takeoverEpoch uint64, now bool) (*metaclient.Registration, error) {
	if !now && time.Now().Before(m.nextReg) {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(m.opts.MetaServers)+1)*m.opts.RequestTimeout)
	defer cancel()
	hb := m.opts.MasterHeartbeat
	if role == protocol.RoleSlave {
		hb = m.opts.SlaveHeartbeat
	}
	opts := append([]metaclient.Option{metaclient.WithLogger(m.lg), metaclient.WithRequestTimeout(m.opts.RequestTimeout)}, m.opts.MetaOptions...)
	if hb > 0 {
		opts = append(opts, metaclient.WithHeartbeatInterval(hb))
	}
	reg, err := metaclient.Register(ctx, m.opts.MetaServers, m.broker(role, takeoverEpoch), opts...)
	if err != nil {
		m.backoff = min(max(2*m.backoff, 100*time.Millisecond), 2*time.Second)
		m.nextReg = time.Now().Add(m.backoff)
		return nil, err
	}
	m.backoff, m.nextReg = 0, time.Time{}
	return reg, nil
}

// masterTick is one turn of roleLoop on a master.
func (m *Member) masterTick() {
	reg := m.mreg.Load()
	if reg == nil {
		var err error
		reg, err = m.register(protocol.RoleMaster, 0, false)
		switch {
		case err == nil && reg != nil:
			if err := m.srv.NewEpoch(reg.Epoch()); err != nil {
				m.lg.Error("cannot record the epoch; giving the seat up", zap.Error(err))
				ctx, cancel := context.WithTimeout(context.Background(), m.opts.RequestTimeout)
				_ = reg.Close(ctx)
				cancel()
				return
			}
			m.mreg.Store(reg)
			m.epoch.Store(reg.Epoch())
			m.termStart = Now()
			m.learnSet(reg.Set())
			m.lg.Info("registered as the group's master", zap.Uint64("epoch", reg.Epoch()), zap.String("eligible_slave", m.set))
		case errors.Is(err, protocol.ErrNotMaster) && m.opts.Fixed:
			m.setState(protocol.WriteFenced, 0, "seat-held", "another broker holds the group's master seat: "+err.Error())
			return
		case errors.Is(err, protocol.ErrNotMaster):
			m.lg.Warn("another broker holds the group: rejoining as its slave", zap.Error(err))
			m.demote(err)
			return
		default:
			if err != nil {
				m.lg.Warn("cannot register as the group's master; retrying", zap.Error(err))
			}
			return // fenced: "not registered yet"
		}
	}
	if err := reg.Err(); errors.Is(err, protocol.ErrNotMaster) {
		if m.opts.Fixed {
			m.setState(protocol.WriteFenced, 0, "seat-held", "another broker holds the group's master seat: "+err.Error())
			return
		}
		m.demote(err)
		return
	}
	if e := reg.Epoch(); e != 0 && e != m.epoch.Load() {
		// The lease lapsed and this broker won its group again: a new
		// epoch, and the eligible set as that election recorded it.
		if err := m.srv.NewEpoch(e); err != nil {
			m.lg.Error("cannot record the new epoch", zap.Error(err))
		}
		m.lg.Warn("won the group again at a new epoch (the lease had lapsed)", zap.Uint64("epoch", e), zap.Uint64("was", m.epoch.Load()))
		m.epoch.Store(e)
		m.learnSet(reg.Set())
	}
	m.replicate(reg)
}

// learnSet takes the eligible set a registration reports (an election's:
// the set as this master's term starts).
func (m *Member) learnSet(s metaclient.EligibleSet) {
	m.set, m.maybe, m.joining = s.Slave, "", false
	m.eligible.Store(&s.Slave)
}

// changeSet asks the meta servers to record slave as eligible ("" none).
// ok: recorded; otherwise deposed says another broker is the master, and
// an error without an answer leaves maybe set (the change may have been
// recorded).
func (m *Member) changeSet(reg *metaclient.Registration, slave string) (ok bool, err error) {
	if time.Now().Before(m.nextSet) {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(m.opts.MetaServers))*m.opts.RequestTimeout)
	defer cancel()
	set, err := reg.SetEligible(ctx, slave, m.opts.WaitSlave)
	if err != nil {
		m.nextSet = time.Now().Add(setRetry)
		if slave != "" && !errors.Is(err, protocol.ErrNotMaster) && !errors.Is(err, protocol.ErrStaleEpoch) {
			m.maybe = slave
		}
		return false, err
	}
	m.set, m.maybe = set.Slave, ""
	m.eligible.Store(&set.Slave)
	m.lg.Info("eligible set recorded", zap.String("slave", set.Slave), zap.Bool("sync", set.Sync))
	return set.Slave == slave, nil
}

// replicate applies the master's replication policy for this turn: the
// eligible set and the write gate (see the package documentation).
func (m *Member) replicate(reg *metaclient.Registration) {
	st := m.srv.Slave()
	healthy := st.ID != "" && st.Connected && st.Lag <= m.opts.SlaveLagLimit
	if m.opts.WaitSlave {
		m.replicateSync(reg, st, healthy)
	} else {
		m.replicateAsync(reg, st, healthy)
	}
}

func (m *Member) replicateSync(reg *metaclient.Registration, st SlaveStatus, healthy bool) {
	if m.set != "" {
		if healthy && st.ID == m.set {
			m.srv.WaitSlave(true)
			m.setState(protocol.WriteWritable, 0, "slave-in-sync", "its eligible slave "+m.set+" holds every acknowledged write")
			return
		}
		if Since(m.termStart) < m.opts.SuspectAfter && !(st.ID == m.set && !st.Connected) {
			// A new term: the eligible slave reconnects within the
			// suspicion time; replies wait for it meanwhile.
			m.srv.WaitSlave(true)
			m.setState(protocol.WriteWritable, 0, "slave-reconnecting", "waiting for its eligible slave "+m.set+" to reconnect")
			return
		}
		lost := fmt.Sprintf("its eligible slave %s is gone (connected %v, lag %v)", m.set, st.Connected && st.ID == m.set, st.Lag.Round(time.Millisecond))
		if m.opts.SlaveDown == SlaveDownReadonly {
			m.readonly("slave-gone", lost+"; policy readonly")
			if healthy && st.ID != m.set {
				// Another slave copies: once it holds the switch point it
				// holds every acknowledged write, and replaces the gone one.
				m.join(reg, st)
			}
			return
		}
		ok, err := m.changeSet(reg, "")
		switch {
		case ok:
			m.srv.WaitSlave(false)
			m.setState(protocol.WriteAlone, 0, "set-shrunk", lost+": removed from the eligible set, serving alone")
		case errors.Is(err, protocol.ErrNotMaster):
			m.demote(err)
		case err != nil || protocol.WriteState(m.state.Load()) == protocol.WriteReadonly:
			detail := lost + " and the eligible set cannot be shrunk"
			if err != nil {
				detail += ": " + err.Error()
			}
			m.readonly("set-unreachable", detail)
		}
		return
	}
	if m.joining && (!healthy || st.ID != m.joinID) {
		m.joining = false
		m.srv.WaitSlave(false)
		m.setState(protocol.WriteAlone, 0, "no-eligible-slave", "its slave left before it caught up: serving alone")
		return
	}
	if m.joining || healthy && st.Lag <= joinLag {
		m.setState(protocol.WriteWritable, 0, "slave-joining", "replies wait for slave "+st.ID+", which catches up before it becomes eligible")
		if m.join(reg, st) {
			m.setState(protocol.WriteWritable, 0, "slave-in-sync", "its eligible slave "+m.set+" holds every acknowledged write")
		}
		return
	}
	m.srv.WaitSlave(false)
	m.setState(protocol.WriteAlone, 0, "no-eligible-slave", "no eligible slave: nobody else can be elected")
}

// join makes a healthy slave that caught up the eligible one (sync mode):
// replies wait for it from a switch point on, and once it holds the switch
// point it holds every acknowledged write: then it is recorded. It reports
// whether the slave is recorded now.
func (m *Member) join(reg *metaclient.Registration, st SlaveStatus) bool {
	if !m.joining || m.joinID != st.ID {
		if st.Lag > joinLag {
			return false
		}
		m.joinPoint = m.srv.WaitSlave(true)
		m.joining, m.joinID = true, st.ID
		m.lg.Info("slave caught up: replies wait for it from here", zap.String("slave", st.ID), zap.Int64("switch_point", m.joinPoint))
	}
	if st.Acked < m.joinPoint {
		return false
	}
	ok, err := m.changeSet(reg, m.joinID)
	switch {
	case ok:
		m.joining = false
		return true
	case errors.Is(err, protocol.ErrNotMaster):
		m.demote(err)
	}
	return false
}

// readonly refuses writes and fails the replies waiting for the slave.
func (m *Member) readonly(code, detail string) {
	m.setState(protocol.WriteReadonly, 0, code, detail)
	m.srv.FailWaiting(protocol.Errorf(protocol.StatusReadonly, fmt.Sprintf("group %s is readonly: %s (stored on the master only)", m.opts.Group, detail)))
}

func (m *Member) replicateAsync(reg *metaclient.Registration, st SlaveStatus, healthy bool) {
	m.srv.WaitSlave(false)
	switch {
	case m.set != "" && !healthy:
		ok, err := m.changeSet(reg, "")
		if errors.Is(err, protocol.ErrNotMaster) {
			m.demote(err)
			return
		}
		if ok {
			m.setState(protocol.WriteAlone, 0, "set-shrunk", "its eligible slave is gone: removed from the eligible set")
			return
		}
	case m.set == "" && m.maybe == "" && healthy && st.Lag <= joinLag:
		// Count on the leases before the slave may be recorded.
		m.maybe = st.ID
		m.leased(reg, st)
		if _, err := m.changeSet(reg, st.ID); errors.Is(err, protocol.ErrNotMaster) {
			m.demote(err)
			return
		}
	case m.set == "" && m.maybe != "":
		if ok, err := m.changeSet(reg, m.maybe); errors.Is(err, protocol.ErrNotMaster) {
			m.demote(err)
			return
		} else if !ok && err == nil {
			m.maybe = "" // the answer recorded another set: trust it
		}
	}
	if m.set == "" && m.maybe == "" {
		m.setState(protocol.WriteAlone, 0, "no-eligible-slave", "no eligible slave: nobody else can be elected")
		return
	}
	m.leased(reg, st)
}

// leased sets the gate of an async master with an eligible slave: writable
// until the later of its meta lease and its slave lease, fenced after.
func (m *Member) leased(reg *metaclient.Registration, st SlaveStatus) {
	until := int64(0)
	if at := reg.RenewedAt(); !at.IsZero() {
		ttl := reg.TTL()
		until = Now() - int64(time.Since(at)) + int64(ttl-fenceMargin(ttl))
	}
	if st.ID != "" && st.Connected && (st.ID == m.set || st.ID == m.maybe) {
		// Only while it copies: a slave silent for the suspicion time may
		// be cut off, and what this master takes from then on it would
		// not have (its promise still holds: this is only sooner).
		until = max(until, st.LeaseUntil)
	}
	if Now() >= until {
		m.setState(protocol.WriteFenced, 0, "leases-expired", "neither its meta lease nor its slave lease holds (async mode, eligible slave "+m.set+m.maybe+")")
		return
	}
	m.setState(protocol.WriteWritable, max(until, 1), "leased", "async: its meta lease or its slave lease holds (eligible slave "+m.set+m.maybe+")")
}

// fenceMargin is how long before its meta lease can expire an async master
// stops counting on it: a quarter of the TTL, at least a second (and never
// more than half the TTL).
func fenceMargin(ttl time.Duration) time.Duration { return min(max(ttl/4, time.Second), ttl/2) }

// demote: another broker is the group's master (or holds its seat). Writes
// stop at once, for good; the server becomes its slave.
func (m *Member) demote(cause error) {
	m.lg.Warn("deposed: another broker is the group's master; rejoining as its slave", zap.Error(cause))
	m.toSlave(protocol.WriteDeposed, "deposed", "another broker is the group's master: "+cause.Error())
}

// toSlave turns the master into a slave: the gate closes in state, the
// server reopens as a slave, the master seat is left.
func (m *Member) toSlave(state protocol.WriteState, code, detail string) {
	m.setState(state, 0, code, detail)
	if m.met != nil {
		m.met.demotions.Inc()
	}
	if err := m.srv.Demote(); err != nil {
		m.lg.Error("cannot reopen as a slave", zap.Error(err))
	}
	if reg := m.mreg.Swap(nil); reg != nil {
		ctx, cancel := context.WithTimeout(context.Background(), m.opts.RequestTimeout)
		_ = reg.Close(ctx)
		cancel()
	}
	m.master.Store(false)
	m.set, m.maybe, m.joining = "", "", false
	empty := ""
	m.eligible.Store(&empty)
	m.copyFrom = Now()
	m.gate.set(protocol.WriteUnknown, 0, "this broker is its slave")
}

// slaveTick is one turn of roleLoop on a slave.
func (m *Member) slaveTick() {
	reg := m.sreg.Load()
	if reg == nil {
		var err error
		if reg, err = m.register(protocol.RoleSlave, 0, false); err != nil {
			m.lg.Warn("cannot register as the group's slave; retrying", zap.Error(err))
		}
		if reg == nil {
			return
		}
		m.sreg.Store(reg)
		m.lg.Info("registered as the group's slave", zap.String("master", reg.Master()), zap.Bool("eligible", reg.Set().Eligible))
	}
	master := reg.Master()
	if cur := m.Following(); master != cur && (master != "" || cur == "") {
		m.following.Store(&master)
		m.gate.setLeader(master)
	}
	cs := m.srv.Copy()
	reg.SetEpoch(cs.Epoch)
	if m.opts.Fixed || time.Now().Before(m.nextElect) {
		return
	}
	set := reg.Set()
	now := Now()
	switch {
	case master == m.opts.Address:
		// An election this slave asked for won without its answer.
		m.campaign(0)
	case master != "" && set.Eligible && set.Sync && m.suspects(cs, now):
		m.campaign(reg.Epoch())
	case master == "" && reg.Healthy() && m.mayCampaign(set, cs, now):
		m.campaign(0)
	}
}

// suspects reports whether the slave suspects its master is gone: its
// copy cannot reach it, or a request has waited SuspectAfter for its
// answer (a master answers a long poll within half of it), or it has heard
// nothing since its copy (re)started that long ago.
func (m *Member) suspects(cs CopyStatus, now int64) bool {
	switch {
	case cs.Failing:
		return true
	case cs.Asked != 0:
		return now-cs.Asked > int64(m.opts.SuspectAfter)
	}
	return cs.Heard < m.copyFrom && now-m.copyFrom > int64(m.opts.SuspectAfter)
}

// mayCampaign says whether a slave whose group has no master may run for
// it. The meta server decides who may win (the eligible set); the slave
// keeps its own promises: in async mode not before its slave lease ran out
// (counted from its start too: a restarted slave forgot its promise),
// unless the master released the group; in sync mode not while it hears
// from its master.
func (m *Member) mayCampaign(set metaclient.EligibleSet, cs CopyStatus, now int64) bool {
	switch {
	case set.Own:
		return true // its own seat: it was the master (the meta server checks nobody else took it)
	case set.Eligible && set.Released:
		return true
	case set.Eligible && set.Sync:
		// A master that still answers its slave is alive (only cut from
		// the meta servers): running would only stop the copy its replies
		// wait for.
		return m.suspects(cs, now)
	case set.Eligible:
		return now >= max(cs.Heard, m.startedAt)+int64(m.opts.SlaveLease)
	case set.Released && set.Slave == "":
		return true
	case !set.Known:
		// A group without a record (a new group): its configured master
		// first; a slave after two lease TTLs of its own start.
		return m.opts.Role == protocol.RoleMaster || time.Duration(now-m.startedAt) > 2*m.ttl()
	}
	if time.Since(m.warnedAt) > 10*time.Second {
		m.warnedAt = time.Now()
		m.lg.Warn("the group has no master but this slave is not eligible (it never caught up with the master): not campaigning")
	}
	return false
}

func (m *Member) ttl() time.Duration {
	if r := m.sreg.Load(); r != nil && r.TTL() > 0 {
		return r.TTL()
	}
	return 10 * time.Second
}

// campaign stops copying and asks for the master seat (a takeover of the
// master at takeoverEpoch when it is not 0); it promotes the server when
// it wins and copies again otherwise. Copying again after an answer that
// never came is safe: the server promotes only with its copy stopped, at
// its ends then, so its old master never acknowledges past them.
func (m *Member) campaign(takeoverEpoch uint64) {
	kind := "campaign"
	if takeoverEpoch != 0 {
		kind = "takeover"
	}
	m.srv.StopCopy()
	reg, err := m.register(protocol.RoleMaster, takeoverEpoch, true)
	if err != nil {
		m.srv.StartCopy()
		m.copyFrom = Now()
		m.nextElect = time.Now().Add(setRetry)
		if m.met != nil {
			m.met.elections.WithLabelValues(kind, "refused").Inc()
		}
		m.lg.Info(kind+" refused; copying again", zap.Uint64("master_epoch", takeoverEpoch), zap.Error(err))
		return
	}
	if m.met != nil {
		m.met.elections.WithLabelValues(kind, "won").Inc()
	}
	m.lg.Warn(kind+": this slave won the group", zap.Uint64("epoch", reg.Epoch()), zap.String("old_master", m.Following()))
	if err := m.srv.Promote(reg.Epoch()); err != nil {
		m.lg.Error("cannot serve as master after winning; giving the group up", zap.Error(err))
		ctx, cancel := context.WithTimeout(context.Background(), m.opts.RequestTimeout)
		_ = reg.Close(ctx)
		cancel()
		m.srv.StartCopy()
		m.copyFrom = Now()
		m.nextElect = time.Now().Add(time.Second)
		return
	}
	m.mreg.Store(reg)
	m.epoch.Store(reg.Epoch())
	m.termStart = Now()
	m.learnSet(reg.Set())
	m.master.Store(true)
	self := m.opts.Address
	m.following.Store(&self)
	m.setState(protocol.WriteAlone, 0, "promoted", "promoted: no eligible slave yet, serving alone")
	if old := m.sreg.Swap(nil); old != nil {
		go func() { // the meta server freed the slave seat already
			ctx, cancel := context.WithTimeout(context.Background(), m.opts.RequestTimeout)
			_ = old.Close(ctx)
			cancel()
		}()
	}
}

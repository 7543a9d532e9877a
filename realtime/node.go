package realtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/realtime/store"
	"go.uber.org/zap"
)

// Node is one broker process's life in its group under automatic failover
// (see "Replication, phase 2" in doc.go). It runs a Broker in the role
// the election gives it and replaces it when the role changes, on the
// same addresses and data directory:
//
//   - slave → master: its slave registration shows no live master, it wins
//     the group's master registration (a new epoch), closes the slave and
//     opens the store again as a master's, which records the epoch's start
//     and serves.
//   - master → slave: its master registration is refused with
//     StatusNotMaster (another broker won after its lease expired): it
//     stops writes at once, closes, and opens again as a slave of the new
//     master.
//   - slave that must cut its copy back (it holds records its master does
//     not): it closes, truncates the store (store.Truncate) and opens
//     again.
//
// Without meta servers, or with a fixed Options.Master, a Node runs one
// Broker in its configured role (no failover).
type Node struct {
	opts Options
	lg   *zap.Logger

	mu        sync.Mutex
	broker    *Broker
	masterReg *metaclient.Registration
	slaveReg  *metaclient.Registration

	startedAt time.Time
	sawMaster bool // a slave registration named a live master once
	warnedAt  time.Time
	nextReg   time.Time

	pickPort func(addr string) (string, error) // freePort unless a test sets it

	truncate chan truncation
	resign   chan resignRequest
	rejoin   chan struct{}
	stop     chan struct{}
	done     chan struct{}
	closeMu  sync.Mutex
	closed   bool
}

// nodeTick is how often a Node checks its registrations.
const nodeTick = 50 * time.Millisecond

// slaveHeartbeat is how often a slave's registration heartbeats: it is how
// soon a slave sees that its master's lease expired.
const slaveHeartbeat = 300 * time.Millisecond

// NewNode checks opts; Start opens the first broker.
func NewNode(opts Options, lg *zap.Logger) (*Node, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if lg == nil {
		lg = zap.NewNop()
	}
	return &Node{opts: opts, lg: lg.Named("node").With(zap.String("group", opts.Group)),
		truncate: make(chan truncation, 1), resign: make(chan resignRequest), rejoin: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// failover reports whether the node takes part in elections.
func (n *Node) failover() bool { return len(n.opts.MetaServers) > 0 && n.opts.Master == "" }

// Start opens and starts the first broker: as the group's master when it
// is configured so and wins the master registration, else as its slave.
func (n *Node) Start() error {
	n.startedAt = time.Now()
	if !n.failover() {
		b, err := New(n.opts, n.lg)
		if err != nil {
			return err
		}
		if err := b.Start(); err != nil {
			b.Close(context.Background())
			return err
		}
		n.broker = b
		close(n.done)
		return nil
	}
	// Every broker of the node listens on the same ports: pick them now. A
	// port picked free can be taken by another listener before the broker
	// binds it (freePort only probes), so a start that finds a picked port
	// in use picks again. A master's failed start has closed its
	// registration; the epoch it recorded stays in its history, empty, as
	// when a lapsed lease is won again.
	addr, httpAddr := n.opts.Addr, n.opts.HTTPAddr
	for attempt := 1; ; attempt++ {
		picked, err := n.pickPorts()
		if err != nil {
			return fmt.Errorf("realtime: %w", err)
		}
		err = n.startFirst()
		if err == nil {
			break
		}
		if !picked || !errors.Is(err, syscall.EADDRINUSE) || attempt == pickPortAttempts {
			return err
		}
		n.lg.Warn("a port picked for the node was taken before the broker bound it; picking again", zap.Error(err))
		n.opts.Addr, n.opts.HTTPAddr = addr, httpAddr
	}
	go n.memberLoop()
	return nil
}

// pickPortAttempts bounds Start's attempts when the ports it picked are
// taken before the broker binds them.
const pickPortAttempts = 5

// pickPorts replaces port 0 in the node's addresses with free ports; picked
// reports whether it did.
func (n *Node) pickPorts() (picked bool, err error) {
	pick := n.pickPort
	if pick == nil {
		pick = freePort
	}
	for _, a := range []*string{&n.opts.Addr, &n.opts.HTTPAddr} {
		if *a == "" {
			continue
		}
		resolved, err := pick(*a)
		if err != nil {
			return picked, err
		}
		picked = picked || resolved != *a
		*a = resolved
	}
	return picked, nil
}

// startFirst starts the node's first broker: the group's master when it is
// configured so and wins the master registration, else its slave.
func (n *Node) startFirst() error {
	var err error
	if n.opts.Role == RoleMaster {
		var reg *metaclient.Registration
		reg, err = n.registerMaster()
		if err == nil {
			err = n.startMaster(reg, false)
		}
		if err != nil {
			n.lg.Warn("not the master; starting as slave", zap.Error(err))
		}
	}
	if n.opts.Role != RoleMaster || err != nil {
		return n.startSlave()
	}
	return nil
}

// Broker returns the broker serving now (nil while the node switches).
func (n *Node) Broker() *Broker {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.broker
}

// Role returns the current broker's role ("" while switching).
func (n *Node) Role() string {
	if b := n.Broker(); b != nil {
		return b.opts.Role
	}
	return ""
}

// Addr returns the client address.
func (n *Node) Addr() net.Addr {
	if b := n.Broker(); b != nil {
		return b.Addr()
	}
	return nil
}

// brokerOptions are the options of the next broker: the node's, in role,
// on the addresses the first broker bound (port 0 resolved).
func (n *Node) brokerOptions(role string) Options {
	o := n.opts
	o.Role = role
	if role == RoleMaster {
		o.Master = ""
	} else {
		o.WaitSlave = false
	}
	return o
}

func (n *Node) openBroker(role string) (*Broker, error) {
	b, err := New(n.brokerOptions(role), n.lg)
	if err != nil {
		return nil, err
	}
	b.managed = true
	b.onTruncate = func(t truncation) {
		select {
		case n.truncate <- t:
		default:
		}
	}
	b.onResign = func(ctx context.Context) error {
		q := resignRequest{ctx: ctx, done: make(chan error, 1)}
		select {
		case n.resign <- q:
		case <-ctx.Done():
			return protocol.Errorf(protocol.StatusUnavailable, "switchover: the node is busy: "+ctx.Err().Error())
		}
		return <-q.done
	}
	b.onResigned = func() {
		select {
		case n.rejoin <- struct{}{}:
		default:
		}
	}
	return b, nil
}

// started pins the addresses the first broker bound, so every later one
// listens (and registers) where clients already know it.
func (n *Node) started(b *Broker) {
	n.mu.Lock()
	n.broker = b
	n.mu.Unlock()
}

func (n *Node) address() string {
	if n.opts.AdvertiseAddr != "" {
		return n.opts.AdvertiseAddr
	}
	return n.opts.Addr // a port already resolved by Start
}

func (n *Node) brokerInfo(role protocol.BrokerRole, report func() (protocol.GroupState, protocol.BrokerLoad)) metaclient.Broker {
	return metaclient.Broker{Kind: protocol.KindRealtime, Role: role, Group: n.opts.Group, Address: n.address(), Report: report}
}

// masterReport: the master registration reports the current broker once
// it is a master, read-write before (it is about to serve).
func (n *Node) masterReport() (protocol.GroupState, protocol.BrokerLoad) {
	if b := n.Broker(); b != nil && b.sync != nil {
		return b.report()
	}
	return protocol.GroupReadWrite, protocol.BrokerLoad{}
}

func (n *Node) slaveReport() (protocol.GroupState, protocol.BrokerLoad) {
	if b := n.Broker(); b != nil && b.replica != nil {
		return b.report()
	}
	return protocol.GroupReadonly, protocol.BrokerLoad{}
}

// registerMaster campaigns: it registers as the group's master, which
// succeeds only when no other broker holds the group's master key.
func (n *Node) registerMaster() (*metaclient.Registration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return metaclient.Register(ctx, n.opts.MetaServers, n.brokerInfo(protocol.RoleMaster, n.masterReport),
		metaclient.WithLogger(n.lg), metaclient.WithRequestTimeout(time.Second))
}

// freePort turns a port-0 address into one with a free port.
func freePort(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port != "0" {
		return addr, err
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startMaster opens a master broker on the won registration reg. A
// promoted master serves alone (send replies do not wait for a slave)
// until a slave has caught up with it.
func (n *Node) startMaster(reg *metaclient.Registration, promoted bool) error {
	b, err := n.openBroker(RoleMaster)
	if err != nil {
		_ = reg.Close(context.Background())
		return err
	}
	if err := b.beginEpoch(reg.Epoch()); err != nil {
		b.Close(context.Background())
		_ = reg.Close(context.Background())
		return err
	}
	b.setLease(reg)
	b.sync.alone.Store(promoted)
	if err := b.Start(); err != nil {
		b.Close(context.Background())
		_ = reg.Close(context.Background())
		return err
	}
	n.started(b)
	n.mu.Lock()
	n.masterReg = reg
	n.mu.Unlock()
	n.lg.Info("serving as master", zap.Uint64("epoch", reg.Epoch()), zap.Bool("promoted", promoted), zap.Stringer("addr", b.Addr()))
	return nil
}

// startSlave opens a slave broker; its registration follows in
// memberLoop.
func (n *Node) startSlave() error {
	b, err := n.openBroker(RoleSlave)
	if err != nil {
		return err
	}
	if err := b.Start(); err != nil {
		b.Close(context.Background())
		return err
	}
	n.mu.Lock()
	if n.slaveReg != nil {
		b.setLease(n.slaveReg)
	}
	n.mu.Unlock()
	n.started(b)
	n.lg.Info("serving as slave", zap.Stringer("addr", b.Addr()))
	return nil
}

// memberLoop watches the registrations and switches roles.
func (n *Node) memberLoop() {
	defer close(n.done)
	t := time.NewTicker(nodeTick)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case cut := <-n.truncate:
			n.cutBack(cut)
		case q := <-n.resign:
			q.done <- n.unregisterMaster(q.ctx)
		case <-n.rejoin:
			n.rejoinAsSlave()
		case <-t.C:
			n.check()
		}
	}
}

func (n *Node) check() {
	n.mu.Lock()
	b, mreg, sreg := n.broker, n.masterReg, n.slaveReg
	n.mu.Unlock()
	switch {
	case b == nil:
		// A switch failed half-way: start again as a slave.
		if time.Now().After(n.nextReg) {
			if err := n.startSlave(); err != nil {
				n.lg.Error("cannot open the broker again", zap.Error(err))
				n.nextReg = time.Now().Add(time.Second)
			}
		}
	case b.sync != nil && mreg == nil:
		// A master that resigned (switchover): rejoinAsSlave follows.
	case mreg != nil:
		if err := mreg.Err(); errors.Is(err, protocol.ErrNotMaster) {
			n.depose(err)
			return
		}
		if e := mreg.Epoch(); e > 0 && e != b.epochOf() {
			// The lease lapsed and this broker won again: a new epoch.
			if err := b.beginEpoch(e); err != nil {
				n.lg.Error("cannot record the new epoch", zap.Error(err))
			}
		}
	case sreg == nil:
		n.registerSlave(b)
	default:
		if m := sreg.Master(); m != "" {
			n.sawMaster = true
			sreg.SetEpoch(b.epoch())
			return
		}
		if sreg.Healthy() && n.mayCampaign(b, sreg.TTL()) {
			n.campaign(b, sreg)
		}
	}
}

// epochOf is the newest epoch of the broker's history.
func (b *Broker) epochOf() uint64 {
	b.histMu.Lock()
	defer b.histMu.Unlock()
	return lastEpoch(b.history)
}

// mayCampaign: a slave that saw a master campaigns once that master is
// gone, if its copy caught up with it (a fresh copy that did not could
// lack messages the master acknowledged when another slave held them: it
// waits for the master to come back, or an operator). A slave that never
// saw a master since it started campaigns when it was configured as the
// master or after two lease TTLs (so a cluster restarting does not hand
// the group to the slave that comes up first).
func (n *Node) mayCampaign(b *Broker, ttl time.Duration) bool {
	if n.sawMaster {
		if b.replica == nil || !b.replica.caughtUp.Load() {
			if time.Since(n.warnedAt) > 10*time.Second {
				n.warnedAt = time.Now()
				n.lg.Warn("the master is gone but this slave's copy never caught up with it: not campaigning")
			}
			return false
		}
		return true
	}
	return n.opts.Role == RoleMaster || time.Since(n.startedAt) > 2*ttl
}

func (n *Node) registerSlave(b *Broker) {
	if time.Now().Before(n.nextReg) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	reg, err := metaclient.Register(ctx, n.opts.MetaServers, n.brokerInfo(protocol.RoleSlave, n.slaveReport),
		metaclient.WithLogger(n.lg), metaclient.WithRequestTimeout(time.Second), metaclient.WithHeartbeatInterval(slaveHeartbeat))
	cancel()
	if err != nil {
		n.lg.Warn("cannot register as slave; retrying", zap.Error(err))
		n.nextReg = time.Now().Add(time.Second)
		return
	}
	reg.SetEpoch(b.epoch())
	n.mu.Lock()
	n.slaveReg = reg
	n.mu.Unlock()
	b.setLease(reg)
	n.lg.Info("registered as slave", zap.String("master", reg.Master()))
}

// campaign tries to become the master; on success the slave is replaced by
// a master on the same store.
func (n *Node) campaign(b *Broker, sreg *metaclient.Registration) {
	reg, err := n.registerMaster()
	if err != nil {
		if !errors.Is(err, protocol.ErrNotMaster) {
			n.lg.Warn("campaign failed", zap.Error(err))
		}
		return
	}
	n.lg.Warn("the master's lease expired: this slave won the group", zap.Uint64("epoch", reg.Epoch()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = sreg.Close(ctx) // frees the slave seat for the old master
	cancel()
	n.mu.Lock()
	n.slaveReg = nil
	n.broker = nil
	n.mu.Unlock()
	n.closeBroker(b)
	if err := n.startMaster(reg, true); err != nil {
		n.lg.Error("cannot serve as master after winning; back to slave", zap.Error(err))
		if err := n.startSlave(); err != nil {
			n.lg.Error("cannot open the broker again", zap.Error(err))
		}
	}
}

// depose: another broker is the master. Writes stop at once; the broker
// closes and opens again as the new master's slave.
func (n *Node) depose(cause error) {
	n.mu.Lock()
	b, reg := n.broker, n.masterReg
	n.broker, n.masterReg = nil, nil
	n.mu.Unlock()
	b.deposed.Store(true)
	n.lg.Warn("deposed: another broker is the group's master; rejoining as its slave", zap.Error(cause))
	n.closeBroker(b)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = reg.Close(ctx)
	cancel()
	n.sawMaster = true
	if err := n.startSlave(); err != nil {
		n.lg.Error("cannot open the broker as slave", zap.Error(err))
	}
}

// resignRequest asks memberLoop to unregister the master (switchover).
type resignRequest struct {
	ctx  context.Context
	done chan error
}

// unregisterMaster leaves the group's master seat (switchover): the slave
// wins it at its next heartbeat. The broker, already refusing writes,
// rejoins as slave once it has answered (rejoinAsSlave).
func (n *Node) unregisterMaster(ctx context.Context) error {
	n.mu.Lock()
	reg := n.masterReg
	n.masterReg = nil
	n.mu.Unlock()
	if reg == nil {
		return protocol.Errorf(protocol.StatusNotMaster, "broker group "+n.opts.Group+": not registered as master")
	}
	if err := reg.Close(ctx); err != nil {
		// Its heartbeats stopped all the same: the lease expires and the
		// slave wins a TTL later.
		return protocol.Errorf(protocol.StatusUnavailable, "switchover: unregister: "+err.Error())
	}
	n.lg.Warn("switchover: left the master seat; rejoining as slave")
	return nil
}

// rejoinAsSlave replaces a master that resigned by a slave.
func (n *Node) rejoinAsSlave() {
	n.mu.Lock()
	b := n.broker
	if b == nil || b.sync == nil || n.masterReg != nil {
		n.mu.Unlock()
		return
	}
	n.broker = nil
	n.mu.Unlock()
	b.deposed.Store(true)
	n.closeBroker(b)
	n.sawMaster = true
	if err := n.startSlave(); err != nil {
		n.lg.Error("cannot open the broker as slave", zap.Error(err))
	}
}

// cutBack truncates the slave's store to its master's divergence point and
// opens it again.
func (n *Node) cutBack(cut truncation) {
	n.mu.Lock()
	b := n.broker
	if b == nil || b.replica == nil {
		n.mu.Unlock()
		return
	}
	n.broker = nil
	n.mu.Unlock()
	n.closeBroker(b)
	rep, err := store.Truncate(n.opts.DataDir, storeOptions(n.brokerOptions(RoleSlave), nil), cut.Message, cut.Action, n.lg)
	if err == nil {
		err = saveEpochs(n.opts.DataDir, cut.History)
	}
	if err != nil {
		n.lg.Error("cannot cut the copy back", zap.Error(err))
	} else {
		n.lg.Warn("copy cut back to the master's history", zap.Int64("message_offset", cut.Message), zap.Int64("action_offset", cut.Action),
			zap.Int64("message_bytes_cut", rep.MessageCut), zap.Int64("action_bytes_cut", rep.ActionCut), zap.Bool("wiped", rep.Wiped))
	}
	if err := n.startSlave(); err != nil {
		n.lg.Error("cannot open the broker again", zap.Error(err))
	}
}

func (n *Node) closeBroker(b *Broker) {
	ctx, cancel := context.WithTimeout(context.Background(), n.opts.ShutdownTimeout)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		n.lg.Warn("broker closed uncleanly", zap.Error(err))
	}
}

// Close stops switching roles, unregisters and closes the broker.
func (n *Node) Close(ctx context.Context) error {
	n.closeMu.Lock()
	if n.closed || n.startedAt.IsZero() {
		n.closeMu.Unlock()
		return nil
	}
	n.closed = true
	n.closeMu.Unlock()
	if n.failover() {
		close(n.stop)
	}
	<-n.done
	n.mu.Lock()
	b, mreg, sreg := n.broker, n.masterReg, n.slaveReg
	n.mu.Unlock()
	if b != nil && b.sync != nil && mreg != nil {
		// A master leaving hands over as a switchover does: writes stop
		// before its seat is free, and a slave that holds its logs gets
		// what it lacks (bounded), so the group loses nothing it acked.
		b.handingOver.Store(true)
		if b.sync.slaveConnected() {
			wait := 5 * time.Second
			if d, ok := ctx.Deadline(); ok {
				wait = min(wait, time.Until(d)/2)
			}
			if err := b.waitSlaveHolds(wait); err != nil {
				n.lg.Warn("closing before the slave held everything", zap.Error(err))
			}
		}
	}
	var errs []error
	for _, r := range []*metaclient.Registration{mreg, sreg} {
		if r != nil {
			if err := r.Close(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if b != nil {
		if err := b.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("realtime: node close: %w", errors.Join(errs...))
	}
	return nil
}

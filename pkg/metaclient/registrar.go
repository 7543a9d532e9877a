package metaclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
	"go.uber.org/zap"
)

// clockBase is the origin of RenewedAt's monotonic readings.
var clockBase = time.Now()

// Broker describes a broker to register.
type Broker struct {
	Kind     protocol.BrokerKind
	Role     protocol.BrokerRole
	Group    string
	BrokerID string // stable across restarts of the same broker (default: Address)
	Address  string // host:port clients and the meta server reach the broker at
	// Report returns the broker's current state (GroupReadWrite or
	// GroupReadonly) and load; it is called before every heartbeat. nil
	// reports read-write and no load.
	Report func() (protocol.GroupState, protocol.BrokerLoad)
	// WriteState returns a master's write state and why (pkg/failover);
	// nil reports none.
	WriteState func() (protocol.WriteState, string)
	// Sync: a master that waits for its slave (--wait-slave); its group's
	// eligible set is in sync mode.
	Sync bool
	// TakeoverEpoch, on a master registration, asks to take the group over
	// from its master at that epoch (the group's eligible slave, in sync
	// mode, when its master does not answer): the first registration only.
	TakeoverEpoch uint64
}

// EligibleSet is a group's eligible set as the meta server last reported
// it (see pkg/failover).
type EligibleSet struct {
	// Known: the group has a record.
	Known bool
	// Sync: the set is in sync mode (its master runs --wait-slave).
	Sync bool
	// Slave is the eligible slave's broker id ("" none).
	Slave string
	// Eligible: this broker is the eligible slave.
	Eligible bool
	// Released: the set's master released the group to its slave (a
	// switchover or a clean shutdown).
	Released bool
	// Own: the set belongs to this broker (it is the set's master).
	Own bool
}

func eligibleSet(flags uint8, slave string) EligibleSet {
	return EligibleSet{Known: flags&protocol.RegisterHasSet != 0, Sync: flags&protocol.RegisterSyncSet != 0,
		Slave: slave, Eligible: flags&protocol.RegisterEligible != 0, Released: flags&protocol.RegisterReleased != 0,
		Own: flags&protocol.RegisterOwnSet != 0}
}

// Registration keeps a broker registered. Its heartbeat loop runs until
// Close.
type Registration struct {
	cfg    config
	addrs  []string
	broker Broker
	own    *transport.Client

	preferred atomic.Int64
	lease     atomic.Int64
	master    atomic.Pointer[string]
	ttl       atomic.Int64 // nanoseconds
	healthy   atomic.Bool
	lastErr   atomic.Pointer[error]
	epoch     atomic.Uint64
	renewedAt atomic.Int64 // monotonic nanoseconds since clockBase; 0: never
	set       atomic.Pointer[EligibleSet]

	poke      chan struct{}
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// Register registers b with the meta servers at addrs and keeps it
// registered with a heartbeat every third of the lease TTL. The first
// registration happens before Register returns: its error (every meta
// server failed, or another broker holds the group's role) is returned.
func Register(ctx context.Context, addrs []string, b Broker, opts ...Option) (*Registration, error) {
	if len(addrs) == 0 {
		return nil, ErrNoMetaServer
	}
	if b.BrokerID == "" {
		b.BrokerID = b.Address
	}
	r := &Registration{cfg: newConfig(opts), addrs: append([]string(nil), addrs...), broker: b,
		poke: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if r.cfg.caller == nil {
		tr, err := r.cfg.newTransport()
		if err != nil {
			return nil, err
		}
		r.own, r.cfg.caller = tr, tr
	}
	var flags uint8
	if b.TakeoverEpoch != 0 && b.Role == protocol.RoleMaster {
		flags |= protocol.RegisterTakeover
		r.epoch.Store(b.TakeoverEpoch)
	}
	if _, err := r.heartbeat(ctx, flags); err != nil {
		if r.own != nil {
			_ = r.own.Close()
		}
		return nil, err
	}
	go r.heartbeatLoop()
	return r, nil
}

// LeaseID returns the etcd lease the registration lives on.
func (r *Registration) LeaseID() int64 { return r.lease.Load() }

// TTL returns the lease TTL the meta server granted.
func (r *Registration) TTL() time.Duration { return time.Duration(r.ttl.Load()) }

// Master returns the address of the group's live master as of the last
// heartbeat (a slave replicates from it); empty when the group has none.
func (r *Registration) Master() string {
	if p := r.master.Load(); p != nil {
		return *p
	}
	return ""
}

// Epoch returns the epoch of the last successful heartbeat's response: a
// master's own (new with each election), a slave's master's (0: none).
func (r *Registration) Epoch() uint64 { return r.epoch.Load() }

// SetEpoch sets the epoch the next heartbeats report (RegisterRequest.Epoch):
// a slave's master's, once it knows it.
func (r *Registration) SetEpoch(e uint64) { r.epoch.Store(e) }

// RenewedAt returns when the last successful heartbeat was sent (zero time
// before any). The meta server renewed the lease after that, so the lease
// lives at least until RenewedAt() + TTL(): a master that has not renewed
// for TTL minus a margin must stop taking writes, because its slave may win
// the group once the lease is gone. The time carries a monotonic reading.
func (r *Registration) RenewedAt() time.Time {
	ns := r.renewedAt.Load()
	if ns == 0 {
		return time.Time{}
	}
	return clockBase.Add(time.Duration(ns))
}

// Err returns the last heartbeat's error; nil after a success.
// errors.Is(err, protocol.ErrNotMaster) on a master's registration means
// another broker is the group's master now: this one was deposed.
func (r *Registration) Err() error {
	if p := r.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Healthy reports whether the last heartbeat reached a meta server.
func (r *Registration) Healthy() bool { return r.healthy.Load() }

// Set returns the group's eligible set as of the last successful heartbeat.
func (r *Registration) Set() EligibleSet {
	if p := r.set.Load(); p != nil {
		return *p
	}
	return EligibleSet{}
}

// Poke sends the next heartbeat now (the broker's state changed: the meta
// server shows it within a round trip instead of a heartbeat interval).
func (r *Registration) Poke() {
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

// SetEligible asks the meta servers to record slave ("" none) as the
// group's eligible slave, in sync mode or not (protocol.CmdEligible), on
// behalf of this master at its epoch. It returns the set as recorded. A
// refusal with protocol.ErrNotMaster means another broker is the master
// now; an error without an answer leaves the set unknown (ask again).
func (r *Registration) SetEligible(ctx context.Context, slave string, sync bool) (EligibleSet, error) {
	q := protocol.EligibleRequest{Group: r.broker.Group, BrokerID: r.broker.BrokerID, Epoch: r.epoch.Load(), Slave: slave}
	if sync {
		q.Flags |= protocol.RegisterSync
	}
	body := protocol.AppendEligibleRequest(nil, &q)
	start := int(r.preferred.Load())
	var lastErr error
	for i := range r.addrs {
		idx := (start + i) % len(r.addrs)
		rctx, cancel := context.WithTimeout(ctx, r.cfg.requestTimeout)
		b, err := r.cfg.caller.Call(rctx, r.addrs[idx], protocol.CmdEligible, body)
		cancel()
		var resp protocol.EligibleResponse
		if err == nil {
			resp, err = protocol.DecodeEligibleResponse(b)
		}
		if err == nil {
			set := eligibleSet(resp.Flags, resp.Slave)
			r.set.Store(&set)
			return set, nil
		}
		lastErr = err
		if errors.Is(err, protocol.ErrInvalid) || errors.Is(err, protocol.ErrNotMaster) || errors.Is(err, protocol.ErrStaleEpoch) || ctx.Err() != nil {
			break
		}
	}
	return EligibleSet{}, fmt.Errorf("metaclient: eligible set of %s: %w", r.broker.Group, lastErr)
}

func (r *Registration) heartbeatLoop() {
	defer close(r.done)
	interval := r.interval()
	for {
		select {
		case <-r.stop:
			return
		case <-r.poke:
		case <-time.After(interval):
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.TTL())
		_, err := r.heartbeat(ctx, 0)
		cancel()
		interval = r.interval()
		if err != nil {
			// Retry sooner, but within the TTL so the lease survives one
			// lost heartbeat.
			interval = min(interval, 500*time.Millisecond)
		}
	}
}

func (r *Registration) interval() time.Duration {
	ttl := r.TTL()
	if ttl <= 0 {
		return time.Second
	}
	if d := r.cfg.heartbeat; d > 0 {
		return max(min(d, ttl/2), 50*time.Millisecond)
	}
	return max(ttl/3, 100*time.Millisecond)
}

// heartbeat sends one register request, trying every meta server in turn.
func (r *Registration) heartbeat(ctx context.Context, flags uint8) (protocol.RegisterResponse, error) {
	state, load := protocol.GroupReadWrite, protocol.BrokerLoad{}
	if r.broker.Report != nil {
		state, load = r.broker.Report()
	}
	req := protocol.RegisterRequest{Flags: flags, Kind: r.broker.Kind, Role: r.broker.Role, State: state,
		Group: r.broker.Group, BrokerID: r.broker.BrokerID, Address: r.broker.Address, LeaseID: r.lease.Load(), Load: load,
		Epoch: r.epoch.Load()}
	if r.broker.WriteState != nil {
		req.WriteState, req.WriteReason = r.broker.WriteState()
	}
	if r.broker.Sync {
		req.Flags |= protocol.RegisterSync
	}
	body := protocol.AppendRegisterRequest(nil, &req)
	start := int(r.preferred.Load())
	var lastErr error
	for i := range r.addrs {
		idx := (start + i) % len(r.addrs)
		sent := time.Since(clockBase)
		rctx, cancel := context.WithTimeout(ctx, r.cfg.requestTimeout)
		b, err := r.cfg.caller.Call(rctx, r.addrs[idx], protocol.CmdRegister, body)
		cancel()
		var resp protocol.RegisterResponse
		if err == nil {
			resp, err = protocol.DecodeRegisterResponse(b)
		}
		if err == nil {
			r.preferred.Store(int64(idx))
			if flags&protocol.RegisterLeaving == 0 {
				r.lease.Store(resp.LeaseID)
				r.ttl.Store(int64(resp.TTL))
				r.master.Store(&resp.Master)
				r.epoch.Store(resp.Epoch)
				r.renewedAt.Store(max(int64(sent), 1))
				set := eligibleSet(resp.Flags, resp.EligibleSlave)
				r.set.Store(&set)
			}
			r.healthy.Store(true)
			r.lastErr.Store(nil)
			return resp, nil
		}
		lastErr = err
		if errors.Is(err, protocol.ErrInvalid) || errors.Is(err, protocol.ErrNotMaster) || ctx.Err() != nil {
			break
		}
	}
	r.healthy.Store(false)
	r.lastErr.Store(&lastErr)
	r.cfg.lg.Warn("broker heartbeat failed", zap.String("broker_group", r.broker.Group), zap.Stringer("role", r.broker.Role), zap.Error(lastErr))
	return protocol.RegisterResponse{}, fmt.Errorf("metaclient: register %s/%s: %w", r.broker.Group, r.broker.Role, lastErr)
}

// Close stops heartbeating and unregisters the broker at once (so its
// group leaves the routes without waiting for the lease to expire).
func (r *Registration) Close(ctx context.Context) error {
	var err error
	r.closeOnce.Do(func() {
		close(r.stop)
		<-r.done
		_, err = r.heartbeat(ctx, protocol.RegisterLeaving)
		if r.own != nil {
			err = errors.Join(err, r.own.Close())
		}
	})
	return err
}

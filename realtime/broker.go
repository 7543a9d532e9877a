package realtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/qmq-go/qmq/pkg/actor"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/opsserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/realtime/store"
	"go.uber.org/zap"
)

// Broker is a realtime broker: the master of one broker group, which serves
// sends, pulls and acks over pkg/protocol and keeps its messages in a
// realtime/store, or its slave, which copies the master's logs (Options.Role).
type Broker struct {
	opts   Options
	lg     *zap.Logger
	limits protocol.Limits
	store  *store.Store
	server *netserver.Server
	ops    *opsserver.Server
	sched  *actor.Scheduler
	dedupe *dedupe
	// dedupeSeeded is closed when seedDedupeLoop has ended (a master with
	// dedupe on; it stays open otherwise).
	dedupeSeeded chan struct{}
	live         *liveness
	metrics      *metrics
	reg          *prometheus.Registry
	keeper       *metaclient.Keeper // registration with the meta servers, when configured
	dead         *deadLetters       // re-driven and purged dead letters
	sync         *syncService       // a master's replication service (nil on a slave)
	replica      *replica           // a slave's sync loop (nil on a master)
	rates        metaclient.Rates   // in and out rates reported to the meta servers

	// Failover (node.go): a Node manages the broker's registration
	// (managed), hands it over (lease) and learns from the replica that
	// the copy must be cut back (onTruncate). deposed: another broker is
	// the group's master now, so no more writes.
	managed     bool
	lease       atomic.Pointer[leaseRef]
	deposed     atomic.Bool
	handingOver atomic.Bool // a switchover stopped writes (switchover.go)
	onTruncate  func(truncation)
	onResign    func(context.Context) error // a Node's: unregister as master
	onResigned  func()                      // a Node's: rejoin as slave
	histMu      sync.Mutex
	history     []protocol.EpochStart // epochs that wrote the logs (epochs.go)
	fair        *fairShare            // deliveries per pull actor, to hold the greedy

	actorsMu  sync.Mutex
	actors    map[actorKey]*pullActor
	bySubject map[string][]*pullActor

	readonly atomic.Bool         // no new messages (admin or self-reported)
	life     opsserver.Readiness // starting, ready, shutting down (/readyz)

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// New opens the broker's store (recovering it) and prepares its servers;
// Start begins serving.
func New(opts Options, lg *zap.Logger) (*Broker, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if lg == nil {
		lg = zap.NewNop()
	}
	lg = lg.Named("realtime").With(zap.String("group", opts.Group))
	b := &Broker{
		opts:         opts,
		lg:           lg,
		limits:       protocol.DefaultLimits,
		live:         newLiveness(),
		actors:       map[actorKey]*pullActor{},
		bySubject:    map[string][]*pullActor{},
		stop:         make(chan struct{}),
		dedupeSeeded: make(chan struct{}),
		reg:          opsserver.NewRegistry(),
	}
	b.limits.MaxBody = opts.MaxBody
	b.dedupe = newDedupe(opts.DedupeWindow, opts.DedupeCapacity, time.Now)
	b.metrics = newMetrics(b.reg, opts.Group)
	b.registerFailoverMetrics(b.reg)
	b.fair = newFairShare(opts.FairShare, b.reg, opts.Group)

	sopts := storeOptions(opts, b.onAppend)
	if !sopts.Replica {
		b.sync = newSyncService(b)
		sopts.ActionLogFloor = b.sync.actionFloor
	}
	st, err := store.Open(opts.DataDir, sopts, lg)
	if err != nil {
		return nil, fmt.Errorf("realtime: open store: %w", err)
	}
	b.store = st
	if b.sync != nil {
		b.sync.store = st
		b.sync.registerMetrics(b.reg)
	} else {
		if b.replica, err = newReplica(b); err != nil {
			st.Close()
			return nil, err
		}
		b.replica.registerMetrics(b.reg)
	}
	if b.dead, err = openDeadLetters(opts.DataDir); err != nil {
		st.Close()
		return nil, err
	}
	if b.history, err = loadEpochs(opts.DataDir); err != nil {
		st.Close()
		return nil, err
	}
	rep := st.OpenReport()
	lg.Info("store opened", zap.String("dir", opts.DataDir), zap.Duration("took", rep.Duration),
		zap.Int64("messages_replayed", rep.MessagesReplayed), zap.Int64("actions_replayed", rep.ActionsReplayed))

	sched, err := actor.NewScheduler(actor.Options{Workers: opts.PullWorkers, Slice: opts.TimeSlice})
	if err != nil {
		st.Close()
		return nil, err
	}
	b.sched = sched

	mux := netserver.NewMux()
	mux.HandleInline(protocol.CmdSend, b.counted(protocol.CmdSend, b.serveSendInline))
	mux.HandleInline(protocol.CmdPull, b.counted(protocol.CmdPull, b.masterOnly(b.servePullInline)))
	mux.HandleInline(protocol.CmdAck, b.counted(protocol.CmdAck, b.masterOnly(b.serveAckInline)))
	mux.Handle(protocol.CmdConsumerManage, b.counted(protocol.CmdConsumerManage, b.masterOnly(b.serveConsumerManage)))
	mux.Handle(protocol.CmdBrokerStats, b.counted(protocol.CmdBrokerStats, b.serveBrokerStats))
	mux.Handle(protocol.CmdDeadLetters, b.counted(protocol.CmdDeadLetters, b.masterOnly(b.serveDeadLetters)))
	mux.Handle(protocol.CmdSyncLog, b.counted(protocol.CmdSyncLog, b.serveSync))
	mux.Handle(protocol.CmdSyncEpoch, b.counted(protocol.CmdSyncEpoch, b.serveSyncEpoch))
	mux.Handle(protocol.CmdSwitchover, b.counted(protocol.CmdSwitchover, b.serveSwitchover))
	srv, err := netserver.New(netserver.Options{Addr: opts.Addr, MaxFrameSize: opts.MaxFrameSize, Spin: opts.Spin}, mux, lg)
	if err != nil {
		sched.Close()
		st.Close()
		return nil, err
	}
	b.server = srv
	b.reg.MustRegister(newBrokerCollector(b))
	if opts.HTTPAddr != "" {
		b.ops = opsserver.New(opsserver.Options{Addr: opts.HTTPAddr, Registry: b.reg, Ready: b.life.Err}, lg)
	}
	return b, nil
}

// storeOptions are the store options of a broker with opts.
func storeOptions(opts Options, onAppend func(subject string, next int64)) store.Options {
	limits := protocol.DefaultLimits
	limits.MaxBody = opts.MaxBody
	sopts := store.DefaultOptions
	sopts.Flush = store.FlushPolicy(opts.Flush)
	sopts.FlushInterval = opts.FlushInterval
	sopts.SegmentSize = opts.SegmentSize
	sopts.ZeroFillAhead = opts.ZeroFillAhead
	sopts.RetentionAge = opts.RetentionAge
	sopts.RetentionBytes = opts.RetentionBytes
	sopts.Limits = limits
	sopts.OnAppend = onAppend
	sopts.Replica = opts.Role == RoleSlave
	return sopts
}

// Start serves clients and starts the broker's loops.
func (b *Broker) Start() error {
	if err := b.server.Start(); err != nil {
		return fmt.Errorf("realtime: %w", err)
	}
	if b.ops != nil {
		if err := b.ops.Start(); err != nil {
			b.server.Close(context.Background())
			return fmt.Errorf("realtime: %w", err)
		}
	}
	if b.sync != nil {
		b.sync.start()
		b.wg.Add(1)
		go b.livenessLoop()
		if b.fair.enabled() {
			b.wg.Add(1)
			go b.pressureLoop()
		}
		if b.dedupe.enabled() {
			b.wg.Add(1)
			go b.seedDedupeLoop()
		}
	}
	if !b.managed {
		b.register()
	}
	if b.replica != nil {
		// After register: without --master it follows the meta servers'.
		b.replica.keeper.Store(b.keeper)
		b.replica.start()
	}
	b.life.SetReady()
	b.lg.Info("serving", zap.Stringer("addr", b.server.Addr()), zap.String("flush", b.opts.Flush),
		zap.String("role", b.opts.Role), zap.Bool("wait_slave", b.opts.WaitSlave))
	return nil
}

// Addr returns the client address (with the real port when listening on
// port 0).
func (b *Broker) Addr() net.Addr { return b.server.Addr() }

// HTTPAddr returns the operations HTTP address, or nil when disabled.
func (b *Broker) HTTPAddr() net.Addr {
	if b.ops == nil {
		return nil
	}
	return b.ops.Addr()
}

// Registry returns the broker's metrics registry.
func (b *Broker) Registry() *prometheus.Registry { return b.reg }

// SetReadonly makes the broker refuse (or take again) new messages.
func (b *Broker) SetReadonly(on bool) { b.readonly.Store(on) }

func (b *Broker) writable() error {
	switch {
	case b.life.Closing():
		return protocol.Errorf(protocol.StatusShuttingDown, "broker group "+b.opts.Group+" is shutting down")
	case b.sync == nil:
		return b.notMaster()
	}
	if err := b.fenced(); err != nil {
		return err
	}
	switch {
	case b.readonly.Load():
		return protocol.Errorf(protocol.StatusReadonly, "broker group "+b.opts.Group+" is readonly")
	}
	return b.sync.admit()
}

func (b *Broker) notMaster() error {
	master := "unknown"
	if b.replica != nil {
		if m := b.replica.master(); m != "" {
			master = m
		}
	}
	return protocol.Errorf(protocol.StatusNotMaster, "broker group "+b.opts.Group+": this broker is its slave (master "+master+")")
}

// masterOnly refuses h's requests on a slave, and on a master that is
// fenced or deposed, with StatusNotMaster.
func (b *Broker) masterOnly(h func(*netserver.Request)) func(*netserver.Request) {
	if b.opts.Role == RoleSlave {
		return func(r *netserver.Request) { r.ReplyError(b.notMaster()) }
	}
	return func(r *netserver.Request) {
		if err := b.fenced(); err != nil {
			r.ReplyError(err)
			return
		}
		h(r)
	}
}

// ReplicationStatus is a broker's replication state, for admin tools.
type ReplicationStatus struct {
	Role  string
	Epoch uint64
	// Master is the address a slave syncs from.
	Master string
	// Master: the slave's durable message-log offset (-1 before the first
	// sync), its lag and the send replies waiting for it; LagReadonly while
	// the lag rule holds the group readonly.
	SlaveOffset       int64
	SlaveActionOffset int64
	WaitingAcks       int
	LagReadonly       bool
	SyncServed        int64 // log bytes sent to the slave since start
	// SlaveResumedFrom is the message-log offset the slave's copy stood
	// at when it last (re)connected.
	SlaveResumedFrom int64
	// Both: committed bytes the slave lacks and how old they are (on a
	// slave: as of its last sync).
	LagBytes   int64
	LagSeconds float64
	// MessageEnd and ActionEnd are this broker's committed log ends.
	MessageEnd, ActionEnd int64
	// Failover (a Node's broker): Alone while a promoted master has no
	// slave that caught up with it; Fenced while a master refuses writes
	// (deposed, or its lease not renewed in time); LeaseRenewedAt and
	// LeaseTTL of its registration (zero without one).
	Alone, Fenced  bool
	LeaseRenewedAt time.Time
	LeaseTTL       time.Duration
}

// Replication reports the broker's role, epoch and replication lag.
func (b *Broker) Replication() ReplicationStatus {
	st := ReplicationStatus{Role: b.opts.Role, SlaveOffset: -1, SlaveActionOffset: -1}
	st.MessageEnd, st.ActionEnd = b.store.CommittedEnds()
	st.Epoch = b.epoch()
	if l := b.currentLease(); l != nil {
		st.LeaseRenewedAt, st.LeaseTTL = l.RenewedAt(), l.TTL()
	}
	st.Fenced = b.sync != nil && b.fenced() != nil
	if y := b.sync; y != nil {
		st.SlaveOffset = y.slaveMsg.Load()
		st.SlaveActionOffset = y.slaveAct.Load()
		st.WaitingAcks = y.waiting()
		st.LagReadonly = y.readonly.Load()
		st.Alone = y.alone.Load()
		st.SyncServed = y.served.Load()
		st.SlaveResumedFrom = y.resumedFrom.Load()
		st.LagBytes = y.lagBytes.Load()
		st.LagSeconds = time.Duration(y.lagNanos.Load()).Seconds()
	}
	if y := b.replica; y != nil {
		st.Master = y.master()
		var d time.Duration
		st.LagBytes, d = y.lag()
		st.LagSeconds = d.Seconds()
	}
	return st
}

// checkNames validates the names of a pull or ack.
func (b *Broker) checkNames(subject, group, consumer string) error {
	if protocol.IsSystemSubject(subject) {
		if _, _, _, ok := protocol.ParseSystemSubject(subject); !ok {
			return protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("malformed system subject %q", subject))
		}
	} else if err := b.limits.CheckSubject(subject); err != nil {
		return err
	}
	if err := b.limits.CheckGroup(group); err != nil {
		return err
	}
	return protocol.CheckConsumerID(consumer)
}

// Close shuts the broker down gracefully: it stops taking new messages,
// answers waiting pulls, finishes the requests in flight, then flushes and
// checkpoints the store. ctx bounds the wait.
func (b *Broker) Close(ctx context.Context) error {
	b.closeOnce.Do(func() { b.closeErr = b.close(ctx) })
	return b.closeErr
}

func (b *Broker) close(ctx context.Context) error {
	b.life.SetClosing()
	var errs []error
	if b.keeper != nil {
		// Leave the routes first so producers go elsewhere at once.
		if err := b.keeper.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	b.shutdownPulls()
	if b.sync != nil {
		b.sync.close() // answers the slave's long poll and the replies waiting for it
	}
	if err := b.server.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	if b.replica != nil {
		b.replica.close()
	}
	close(b.stop)
	b.wg.Wait()
	b.sched.Close()
	if err := b.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("realtime: close store: %w", err))
	}
	if b.ops != nil {
		if err := b.ops.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	b.lg.Info("closed")
	return errors.Join(errs...)
}

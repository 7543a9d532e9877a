package realtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/qmq-go/qmq/pkg/actor"
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/failover"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/opsserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/secure"
	"github.com/qmq-go/qmq/pkg/tracing"
	"github.com/qmq-go/qmq/realtime/store"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Broker is a realtime broker: the master of one broker group, which serves
// sends, pulls and acks over pkg/protocol and keeps its messages in a
// realtime/store, or its slave, which copies the master's logs. Its role
// changes in place (term.go): the listeners, connections and metrics stay,
// the store is promoted where it is, and only a demotion reopens it.
type Broker struct {
	opts   Options
	tracer trace.Tracer // from Options.TracerProvider; nil: tracing off (tracing.go)
	lg     *zap.Logger
	limits protocol.Limits
	server *netserver.Server
	ops    *opsserver.Server
	// kit is the broker's TLS, credentials and connection bounds;
	// policies (nil without meta servers) the identities it checks
	// connections against (pkg/secure).
	kit      *secure.Kit
	policies *metaclient.PolicyCache
	sched    *actor.Scheduler
	live     *liveness
	acks     *ackOrder // each consumer's acks in arrival order
	// term is the role the broker serves in, with what it owns in it (the
	// store, log shipping, the dedupe table); handlers load it once per
	// request (cur).
	term       atomic.Pointer[term]
	metrics    *metrics
	reg        *prometheus.Registry
	keeper     *metaclient.Keeper // registration of a slave with a fixed master
	dead       *deadLetters       // re-driven and purged dead letters
	deadCounts deadCounts         // dead letters per dead subject, for stats and metrics
	rates      metaclient.Rates   // in and out rates reported to the meta servers
	subjRates  subjectRates       // per subject and group, for CmdBrokerStats
	fair       *fairShare         // deliveries per pull actor, to hold the greedy

	// Failover: member runs the group's role loop (with meta servers and no
	// fixed master); gate is its write gate (always open for a standalone
	// master, closed for a fixed slave). roleMu serializes role changes
	// (Promote, Demote, StopCopy, StartCopy, cutBack, Close); copyStopped
	// (under roleMu) keeps a slave from copying while it campaigns.
	member      atomic.Pointer[failover.Member]
	gate        *failover.Gate
	roleMu      sync.Mutex
	copyStopped bool
	copyWatch   failover.CopyWatch
	replErrors  atomic.Int64 // failed sync requests of the slave's copies
	histMu      sync.Mutex
	history     []protocol.EpochStart // epochs that wrote the logs (pkg/failover history)

	actorsMu  sync.Mutex
	actors    map[actorKey]*pullActor
	bySubject map[string][]*pullActor

	readonly atomic.Bool         // no new messages (admin or self-reported)
	life     opsserver.Readiness // starting, ready, shutting down (/readyz)

	stop      chan struct{}
	wg        sync.WaitGroup // cutBack goroutines
	closeOnce sync.Once
	closeErr  error
}

// cur returns the broker's current term.
func (b *Broker) cur() *term { return b.term.Load() }

// st returns the current term's store.
func (b *Broker) st() *store.Store { return b.cur().store }

// New opens the broker's store (recovering it) in Options.Role and
// prepares its servers; Start begins serving. With meta servers and no
// fixed Master the role then follows the group's election (pkg/failover).
func New(opts Options, lg *zap.Logger) (*Broker, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if lg == nil {
		lg = zap.NewNop()
	}
	lg = lg.Named("realtime").With(zap.String("group", opts.Group))
	b := &Broker{
		opts:      opts,
		lg:        lg,
		limits:    protocol.DefaultLimits,
		live:      newLiveness(),
		acks:      newAckOrder(),
		actors:    map[actorKey]*pullActor{},
		bySubject: map[string][]*pullActor{},
		stop:      make(chan struct{}),
		reg:       opsserver.NewRegistry(),
		gate:      failover.NewGate(opts.Group), // closed: a slave's, or a master's until its role loop registers it
	}
	b.limits.MaxBody = opts.MaxBody
	if opts.TracerProvider != nil {
		b.tracer = opts.TracerProvider.Tracer(tracing.Instrumentation)
	}
	b.metrics = newMetrics(b.reg, opts.Group)
	b.fair = newFairShare(opts.FairShare, b.reg, opts.Group)

	var err error
	if b.kit, err = opts.Secure.Build(lg); err != nil {
		return nil, err
	}
	if b.history, err = failover.LoadHistory(opts.DataDir); err != nil {
		return nil, err
	}
	t, err := b.openTerm(opts.Role)
	if err != nil {
		return nil, err
	}
	b.term.Store(t)
	if t.sync != nil && !b.managed() {
		b.gate = failover.OpenGate(opts.Group) // standalone: nobody else can be elected
	}
	if b.dead, err = openDeadLetters(opts.DataDir); err != nil {
		t.store.Close()
		return nil, err
	}
	rep := t.store.Stats().Open
	lg.Info("store opened", zap.String("dir", opts.DataDir), zap.String("role", opts.Role), zap.Duration("took", rep.Duration),
		zap.Int64("messages_replayed", rep.MessagesReplayed), zap.Int64("actions_replayed", rep.ActionsReplayed))

	sched, err := actor.NewScheduler(actor.Options{Workers: opts.PullWorkers, Slice: opts.TimeSlice})
	if err != nil {
		t.store.Close()
		return nil, err
	}
	b.sched = sched

	mux := netserver.NewMux()
	mux.HandleInline(protocol.CmdSend, b.counted(protocol.CmdSend, b.serveSendInline))
	mux.HandleInline(protocol.CmdPull, b.counted(protocol.CmdPull, b.masterOnly(b.servePullInline)))
	mux.HandleInline(protocol.CmdAck, b.counted(protocol.CmdAck, b.masterOnly(b.serveAckInline)))
	mux.Handle(protocol.CmdConsumerManage, b.counted(protocol.CmdConsumerManage,
		b.allowed(adminWrite, "manage consumer groups (admin write)", b.masterOnly(b.serveConsumerManage))))
	mux.Handle(protocol.CmdBrokerStats, b.counted(protocol.CmdBrokerStats,
		b.allowed(adminRead, "read broker stats (admin read)", b.serveBrokerStats)))
	mux.Handle(protocol.CmdDeadLetters, b.counted(protocol.CmdDeadLetters, b.masterOnly(b.serveDeadLetters)))
	mux.Handle(protocol.CmdFindMessages, b.counted(protocol.CmdFindMessages,
		b.allowed(adminRead, "look messages up (admin read)", b.serveFindMessages)))
	copying := "copy group " + opts.Group + "'s logs (a broker of the group)"
	mux.HandleInline(protocol.CmdSyncLog, b.counted(protocol.CmdSyncLog, b.allowed(brokerOf(opts.Group), copying, b.serveSync)))
	mux.HandleInline(protocol.CmdSyncLogAhead, b.counted(protocol.CmdSyncLogAhead, b.allowed(brokerOf(opts.Group), copying, b.serveSync)))
	mux.Handle(protocol.CmdSyncEpoch, b.counted(protocol.CmdSyncEpoch, b.allowed(brokerOf(opts.Group), copying, b.serveSyncEpoch)))
	mux.Handle(protocol.CmdSyncIndexRun, b.counted(protocol.CmdSyncIndexRun, b.allowed(brokerOf(opts.Group), copying, b.serveSyncIndexRun)))
	mux.Handle(protocol.CmdSwitchover, b.counted(protocol.CmdSwitchover,
		b.allowed(adminWrite, "hand the group over (admin write)", b.serveSwitchover)))
	authority := auth.NewAuthority(nil) // certificate identities only, without meta servers
	if len(opts.MetaServers) > 0 {
		if b.policies, err = b.kit.Policies(opts.MetaServers, filepath.Join(opts.DataDir, policyFile), lg.Named("policy")); err != nil {
			sched.Close()
			t.store.Close()
			return nil, err
		}
		if b.policies != nil {
			authority = b.policies.Authority()
		}
	}
	nopts := netserver.Options{Addr: opts.Addr, MaxFrameSize: opts.MaxFrameSize, Spin: opts.Spin}
	b.kit.Listener(&nopts, authority)
	srv, err := netserver.New(nopts, mux, lg)
	if err != nil {
		sched.Close()
		t.store.Close()
		return nil, err
	}
	b.server = srv
	b.registerTermMetrics(b.reg)
	b.reg.MustRegister(newBrokerCollector(b), netserver.LimitsCollector("qmq_realtime", func() *netserver.Server { return b.server }))
	if opts.HTTPAddr != "" {
		b.ops = opsserver.New(opsserver.Options{Addr: opts.HTTPAddr, Registry: b.reg, Ready: b.life.Err,
			TLS: b.kit.ServerTLS, Authorize: b.kit.Authorize(authority), Insecure: b.kit.Insecure()}, lg)
	}
	return b, nil
}

// policyFile is the broker's copy of the meta servers' policy, in its data
// directory (pkg/metaclient PolicyCache).
const policyFile = "policy"

// managed reports whether the group's election decides the broker's role.
func (b *Broker) managed() bool { return len(b.opts.MetaServers) > 0 && b.opts.Master == "" }

// storeOptions are the store options of a broker with opts.
// A replica's store copies; floor holds back action-log deletion (a
// master's: what its slave has not copied).
func storeOptions(opts Options, replica bool, onAppend func(subject string, next int64), floor func() int64) store.Options {
	limits := protocol.DefaultLimits
	limits.MaxBody = opts.MaxBody
	sopts := store.DefaultOptions
	sopts.Flush = store.FlushPolicy(opts.Flush)
	sopts.FlushInterval = opts.FlushInterval
	sopts.SegmentSize = opts.SegmentSize
	sopts.ZeroFillAhead = opts.ZeroFillAhead
	sopts.PageCacheWindow = opts.PageCacheWindow
	sopts.ReplicaPageCacheWindow = opts.SlavePageCacheWindow
	sopts.NoMessageIndex = opts.NoMessageIndex
	sopts.RetentionAge = opts.RetentionAge
	sopts.RetentionBytes = opts.RetentionBytes
	sopts.Limits = limits
	sopts.OnAppend = onAppend
	sopts.Replica = replica
	sopts.CopyMessageIndex = replica // replicaindex.go
	sopts.ActionLogFloor = floor
	return sopts
}

// Start serves clients, starts the term's loops and joins the group: the
// role loop when the election decides the role, else a fixed registration
// (a slave with --master), else nothing (standalone: always writable).
func (b *Broker) Start() error {
	if b.policies != nil {
		b.policies.Start()
	}
	if err := b.server.Start(); err != nil {
		return fmt.Errorf("realtime: %w", err)
	}
	if b.ops != nil {
		if err := b.ops.Start(); err != nil {
			b.server.Close(context.Background())
			return fmt.Errorf("realtime: %w", err)
		}
	}
	t := b.cur()
	switch {
	case b.managed():
		fo := failover.NewOptions()
		fo.Kind, fo.Group, fo.Address, fo.MetaServers = protocol.KindRealtime, b.opts.Group, b.advertised(), b.opts.MetaServers
		fo.Role, fo.WaitSlave, fo.SlaveLagLimit, fo.Registry = protocol.RoleMaster, b.opts.WaitSlave, b.opts.SlaveLagReadonly, b.reg
		if b.opts.Role == RoleSlave {
			fo.Role = protocol.RoleSlave
		}
		fo.SlaveDown, fo.SuspectAfter, fo.Gate = b.opts.SlaveDown, b.opts.SuspectAfter, b.gate
		fo.MetaOptions = b.kit.Meta()
		m, err := failover.New(fo, b, b.lg)
		if err != nil {
			b.server.Close(context.Background())
			return fmt.Errorf("realtime: %w", err)
		}
		b.member.Store(m)
	}
	b.startTerm(t)
	switch {
	case b.member.Load() != nil:
		b.member.Load().Start()
	case t.replica != nil:
		b.register()
	}
	b.life.SetReady()
	b.lg.Info("serving", zap.Stringer("addr", b.server.Addr()), zap.String("flush", b.opts.Flush),
		zap.String("role", t.role), zap.Bool("wait_slave", b.opts.WaitSlave), zap.Bool("failover", b.member.Load() != nil))
	return nil
}

// Role returns the broker's role now: RoleMaster or RoleSlave.
func (b *Broker) Role() string { return b.cur().role }

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

func (b *Broker) writable(t *term) error {
	switch {
	case b.life.Closing():
		return protocol.Errorf(protocol.StatusShuttingDown, "broker group "+b.opts.Group+" is shutting down")
	case t.sync == nil:
		return b.notMaster()
	case !b.gate.Open():
		return b.gate.Err()
	case b.readonly.Load():
		return protocol.Errorf(protocol.StatusReadonly, "broker group "+b.opts.Group+" is readonly")
	}
	return t.sync.admit()
}

func (b *Broker) notMaster() error {
	master := "unknown"
	if m := b.following(); m != "" {
		master = m
	}
	return protocol.Errorf(protocol.StatusNotMaster, "broker group "+b.opts.Group+": this broker is its slave (master "+master+")")
}

// masterOnly refuses h's requests on a slave, and on a master whose gate
// is closed (deposed, fenced, handing over), with StatusNotMaster; a
// readonly master serves them.
func (b *Broker) masterOnly(h func(*netserver.Request)) func(*netserver.Request) {
	return func(r *netserver.Request) {
		if b.cur().sync == nil {
			r.ReplyError(b.notMaster())
			return
		}
		if !b.gate.Open() {
			if err := b.gate.Err(); !errors.Is(err, protocol.ErrReadonly) {
				r.ReplyError(err)
				return
			}
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
	// Failover: WriteState is the master's write state (pkg/failover:
	// writable, alone, readonly, fenced, deposed, handing-over) and
	// WriteReason why; Alone while it serves without an eligible slave;
	// Fenced while it refuses writes for another reason than a readonly
	// group; EligibleSlave is its group's eligible slave as it knows it;
	// LeaseRenewedAt and LeaseTTL of its registration (zero without one).
	WriteState     protocol.WriteState
	WriteReason    string
	Alone, Fenced  bool
	EligibleSlave  string
	LeaseRenewedAt time.Time
	LeaseTTL       time.Duration
}

// Replication reports the broker's role, epoch and replication lag.
func (b *Broker) Replication() ReplicationStatus {
	t := b.cur()
	st := ReplicationStatus{Role: t.role, SlaveOffset: -1, SlaveActionOffset: -1}
	st.MessageEnd, st.ActionEnd = t.store.CommittedEnds()
	st.Epoch = b.epoch()
	if m := b.member.Load(); m != nil {
		st.LeaseRenewedAt, st.LeaseTTL = m.Lease()
		st.WriteState, st.WriteReason = m.WriteState()
		st.EligibleSlave = m.EligibleSlave()
	}
	if y := t.sync; y != nil {
		gs := b.gate.State()
		st.Fenced = !b.gate.Open() && gs != protocol.WriteReadonly
		st.Alone = gs == protocol.WriteAlone
		st.SlaveOffset = y.slaveMsg.Load()
		st.SlaveActionOffset = y.slaveAct.Load()
		st.WaitingAcks = y.waiting()
		st.LagReadonly = y.readonly.Load() || gs == protocol.WriteReadonly
		st.SyncServed = y.served.Load()
		st.SlaveResumedFrom = y.resumedFrom.Load()
		st.LagBytes = y.lagBytes.Load()
		st.LagSeconds = time.Duration(y.lagNanos.Load()).Seconds()
	}
	if y := t.replica; y != nil {
		st.Master = b.following()
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
	var errs []error
	if b.member.Load() != nil {
		// A master hands the group to its slave before it stops writing
		// for good; the role loop stops (no role change after this).
		if err := b.member.Load().Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	b.life.SetClosing()
	if b.keeper != nil {
		// Leave the routes first so producers go elsewhere at once.
		if err := b.keeper.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	b.roleMu.Lock()
	close(b.stop)
	t := b.cur()
	b.shutdownPulls()
	if t.sync != nil {
		t.sync.close(nil) // answers the slave's long poll and the replies waiting for it
	}
	if err := b.server.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	if t.replica != nil {
		t.replica.close()
	}
	b.stopTerm(t)
	b.roleMu.Unlock()
	b.wg.Wait()
	b.sched.Close()
	if err := t.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("realtime: close store: %w", err))
	}
	if b.ops != nil {
		if err := b.ops.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if b.policies != nil {
		errs = append(errs, b.policies.Close())
	}
	b.lg.Info("closed")
	return errors.Join(errs...)
}

package realtime

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// lease is what a broker needs of its registration with the meta servers
// (a *metaclient.Registration that a Node hands over).
type lease interface {
	// Epoch is the group's master epoch as of the last heartbeat.
	Epoch() uint64
	// RenewedAt is when the last successful heartbeat was sent: the lease
	// lives at least until RenewedAt + TTL.
	RenewedAt() time.Time
	TTL() time.Duration
	// Master is the group's live master as of the last heartbeat.
	Master() string
}

type leaseRef struct{ lease }

// setLease hands the broker its registration (a Node's).
func (b *Broker) setLease(l lease) {
	if l == nil {
		b.lease.Store(nil)
		return
	}
	b.lease.Store(&leaseRef{l})
}

func (b *Broker) currentLease() lease {
	if r := b.lease.Load(); r != nil {
		return r.lease
	}
	return nil
}

// fenceMargin is how long before its lease can expire a master stops
// writes: a quarter of the TTL, at least a second (and never more than
// half the TTL).
func fenceMargin(ttl time.Duration) time.Duration {
	return min(max(ttl/4, time.Second), ttl/2)
}

// fenced refuses writes (sends, pulls, acks, consumer and dead-letter
// commands) on a master that another broker replaced (deposed) or whose
// registration was last renewed so long ago that its lease may expire
// within fenceMargin: a slave can win the group only after the lease
// expired, so an old master never takes a write after a new one is
// elected. It is measured on the monotonic clock from when the last
// successful heartbeat was sent. A broker without a lease (standalone, or
// registered through a Keeper) is never fenced.
func (b *Broker) fenced() error {
	if b.deposed.Load() {
		return protocol.Errorf(protocol.StatusNotMaster, "broker group "+b.opts.Group+": another broker is its master now")
	}
	if b.handingOver.Load() {
		return protocol.Errorf(protocol.StatusNotMaster, "broker group "+b.opts.Group+": its master is handing the group over to its slave")
	}
	l := b.currentLease()
	if l == nil {
		return nil
	}
	ttl := l.TTL()
	if since := time.Since(l.RenewedAt()); since > ttl-fenceMargin(ttl) {
		return protocol.Errorf(protocol.StatusNotMaster, fmt.Sprintf(
			"broker group %s: its master has not renewed its lease for %v (ttl %v): writes stop until it does",
			b.opts.Group, since.Round(time.Millisecond), ttl))
	}
	return nil
}

// epoch is the epoch the broker serves in: a master's lease epoch, else
// the newest epoch of its history (a slave's: its master's).
func (b *Broker) epoch() uint64 {
	if b.sync != nil {
		if l := b.currentLease(); l != nil && l.Epoch() > 0 {
			return l.Epoch()
		}
		// A broker in a fixed role (not run by a Node) registered through
		// its keeper: its registration's epoch.
		if b.keeper != nil {
			if r := b.keeper.Registration(); r != nil && r.Epoch() > 0 {
				return r.Epoch()
			}
		}
	}
	b.histMu.Lock()
	defer b.histMu.Unlock()
	return lastEpoch(b.history)
}

// checkEpoch refuses a request that carries a newer epoch than the
// broker's: the client learnt of a master elected after this one. A broker
// that knows no epoch (no meta server, or not registered yet) checks
// nothing.
func (b *Broker) checkEpoch(e uint64) error {
	if mine := b.epoch(); mine > 0 && e > mine && b.sync != nil {
		return protocol.Errorf(protocol.StatusStaleEpoch, fmt.Sprintf(
			"broker group %s: the request is for epoch %d, this master serves epoch %d (replaced)", b.opts.Group, e, mine))
	}
	return nil
}

func (b *Broker) epochHistory() []protocol.EpochStart {
	b.histMu.Lock()
	defer b.histMu.Unlock()
	return append([]protocol.EpochStart(nil), b.history...)
}

// setHistory makes h the broker's epoch history, on disk first.
func (b *Broker) setHistory(h []protocol.EpochStart) error {
	b.histMu.Lock()
	defer b.histMu.Unlock()
	if epochsEqual(h, b.history) {
		return nil
	}
	if err := saveEpochs(b.opts.DataDir, h); err != nil {
		return err
	}
	b.history = append([]protocol.EpochStart(nil), h...)
	return nil
}

// beginEpoch records that this master writes in epoch e from its current
// committed ends on (before it takes a write in it).
func (b *Broker) beginEpoch(e uint64) error {
	m, a := b.store.CommittedEnds()
	h := withEpoch(b.epochHistory(), e, m, a)
	if err := b.setHistory(h); err != nil {
		return err
	}
	b.lg.Info("serving epoch", zap.Uint64("epoch", e), zap.Int64("message_start", m), zap.Int64("action_start", a))
	return nil
}

func epochsEqual(a, b []protocol.EpochStart) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// truncation is what a slave learnt from its master's CmdSyncEpoch answer
// when its copy holds records the master does not: cut both logs back to
// these offsets and take the master's history.
type truncation struct {
	Message, Action int64
	History         []protocol.EpochStart
}

func (t *truncation) Error() string {
	return fmt.Sprintf("the copy holds records its master does not: it must be cut back to message offset %d, action offset %d", t.Message, t.Action)
}

// serveSyncEpoch answers a slave's CmdSyncEpoch: where its copy stops
// agreeing with this master's logs, and this master's history.
func (b *Broker) serveSyncEpoch(r *netserver.Request) {
	if b.sync == nil {
		r.ReplyError(protocol.Errorf(protocol.StatusNotMaster, "broker group "+b.opts.Group+": this broker is a slave"))
		return
	}
	q, err := protocol.DecodeSyncEpochRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if q.Group != b.opts.Group {
		r.ReplyError(protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("a slave of broker group %q asked the master of %q", q.Group, b.opts.Group)))
		return
	}
	if err := b.fenced(); err != nil {
		r.ReplyError(err)
		return
	}
	h := b.epochHistory()
	if s, m := lastEpoch(q.History), lastEpoch(h); s > m {
		r.ReplyError(protocol.Errorf(protocol.StatusStaleEpoch, fmt.Sprintf(
			"broker group %s: the slave has copied epoch %d, this master's newest is %d (it has been replaced)", b.opts.Group, s, m)))
		return
	}
	mEnd, aEnd := b.store.CommittedEnds()
	msg, act := divergence(h, q.History, mEnd, aEnd)
	r.Reply(protocol.StatusOK, protocol.AppendSyncEpochResponse(nil, &protocol.SyncEpochResponse{
		TruncateMessage: msg, TruncateAction: act, History: h}))
}

// registerFailoverMetrics adds the broker's role, epoch and fencing.
func (b *Broker) registerFailoverMetrics(reg prometheus.Registerer) {
	labels := prometheus.Labels{"group": b.opts.Group}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qmq_realtime_role", ConstLabels: labels,
			Help: "This broker's role: 1 master, 2 slave."}, func() float64 {
			if b.sync != nil {
				return 1
			}
			return 2
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qmq_realtime_epoch", ConstLabels: labels,
			Help: "The epoch this broker serves in (a slave: its master's)."}, func() float64 { return float64(b.epoch()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qmq_realtime_message_end_bytes", ConstLabels: labels,
			Help: "The committed end of this broker's message log."}, func() float64 { m, _ := b.store.CommittedEnds(); return float64(m) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qmq_realtime_action_end_bytes", ConstLabels: labels,
			Help: "The committed end of this broker's action log."}, func() float64 { _, a := b.store.CommittedEnds(); return float64(a) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qmq_realtime_fenced", ConstLabels: labels,
			Help: "1 while a master refuses writes: deposed, or its lease not renewed in time."}, func() float64 {
			if b.sync != nil && b.fenced() != nil {
				return 1
			}
			return 0
		}),
	)
}

package realtime

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/qmq-go/qmq/pkg/failover"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// The Broker is the failover.Server of its group's role loop: term.go
// changes its role (Promote, Demote, NewEpoch, StopCopy, StartCopy); the
// methods here report its log shipping to the loop and act on it.
var _ failover.Server = (*Broker)(nil)

// Load is what heartbeats report (failover.Server).
func (b *Broker) Load() protocol.BrokerLoad {
	_, load := b.report()
	return load
}

// Slave reports the slave copying from this master (failover.Server):
// Acked and End are message-log offsets (its durable end, the master's
// committed end).
func (b *Broker) Slave() failover.SlaveStatus {
	t := b.cur()
	y := t.sync
	if y == nil {
		return failover.SlaveStatus{}
	}
	id, connected, lease := y.slaves.Status()
	end, _ := t.store.CommittedEnds()
	return failover.SlaveStatus{ID: id, Connected: connected, Acked: y.slaveMsg.Load(), End: end,
		Lag: time.Duration(y.lagNanos.Load()), LeaseUntil: lease}
}

// WaitSlave makes send replies wait for the slave or not (failover.Server).
func (b *Broker) WaitSlave(on bool) int64 {
	if y := b.cur().sync; y != nil {
		return y.setWait(on)
	}
	return 0
}

// FailWaiting fails the send replies waiting for the slave
// (failover.Server).
func (b *Broker) FailWaiting(err error) {
	if y := b.cur().sync; y != nil {
		y.failWaiting(err)
	}
}

// HandOver waits until the slave holds both logs up to the committed ends
// (failover.Server; writes are stopped by the gate). Pulls and acks that
// passed the gate just before it may still add actions: the buffered ones
// are flushed, and the ends must hold still across a second flush.
func (b *Broker) HandOver(ctx context.Context) error {
	t := b.cur()
	if t.sync == nil {
		return protocol.Errorf(protocol.StatusNotMaster, "broker group "+b.opts.Group+": not a master")
	}
	stable := false
	for {
		if err := t.store.FlushActions(); err != nil {
			return protocol.Errorf(protocol.StatusStoreError, "hand over: "+err.Error())
		}
		m, a := t.store.CommittedEnds()
		sm, sa := t.sync.slaveWrote()
		if sm >= m && sa >= a {
			if stable {
				return nil
			}
			stable = true
		} else {
			stable = false
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("broker group %s: the slave holds message %d / action %d of %d / %d: %w", b.opts.Group, sm, sa, m, a, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Copy reports the slave's copy (failover.Server).
func (b *Broker) Copy() failover.CopyStatus {
	heard, asked, failing := b.copyWatch.Status()
	return failover.CopyStatus{Master: b.following(), Epoch: b.epoch(), Heard: heard, Asked: asked, Failing: failing}
}

// serveSwitchover hands the group to the slave (a planned switchover,
// protocol.CmdSwitchover; the role loop runs it: failover.Member.Switchover).
func (b *Broker) serveSwitchover(r *netserver.Request) {
	q, err := protocol.DecodeSwitchoverRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if q.Group != b.opts.Group {
		r.ReplyError(protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("broker group %s asked to hand over group %s", b.opts.Group, q.Group)))
		return
	}
	if b.member.Load() == nil {
		r.ReplyError(protocol.Errorf(protocol.StatusNotMaster, "broker group "+b.opts.Group+": this broker is not an elected master"))
		return
	}
	go func() {
		if err := b.member.Load().Switchover(context.Background(), q.Epoch, q.Timeout); err != nil {
			r.ReplyError(err)
			return
		}
		r.Reply(protocol.StatusOK)
	}()
}

// registerTermMetrics adds the series of the broker's role and of its log
// shipping, read from the current term at each scrape.
func (b *Broker) registerTermMetrics(reg prometheus.Registerer) {
	labels := prometheus.Labels{"group": b.opts.Group}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, ConstLabels: labels, Help: help}, f)
	}
	master := func(f func(y *syncService) float64, none float64) func() float64 {
		return func() float64 {
			if y := b.cur().sync; y != nil {
				return f(y)
			}
			return none
		}
	}
	slave := func(f func(y *replica) float64) func() float64 {
		return func() float64 {
			if y := b.cur().replica; y != nil {
				return f(y)
			}
			return 0
		}
	}
	flag := func(on bool) float64 {
		if on {
			return 1
		}
		return 0
	}
	reg.MustRegister(
		gauge("qmq_realtime_role", "This broker's role: 1 master, 2 slave.", func() float64 {
			if b.cur().sync != nil {
				return 1
			}
			return 2
		}),
		gauge("qmq_realtime_epoch", "The epoch this broker serves in (a slave: its master's).", func() float64 { return float64(b.epoch()) }),
		gauge("qmq_realtime_message_end_bytes", "The committed end of this broker's message log.", func() float64 { m, _ := b.st().CommittedEnds(); return float64(m) }),
		gauge("qmq_realtime_action_end_bytes", "The committed end of this broker's action log.", func() float64 { _, a := b.st().CommittedEnds(); return float64(a) }),
		gauge("qmq_realtime_fenced", "1 while a master refuses writes for another reason than a readonly group: deposed, fenced (async leases), handing over.",
			master(func(*syncService) float64 {
				return flag(!b.gate.Open() && b.gate.State() != protocol.WriteReadonly)
			}, 0)),
		gauge("qmq_realtime_slave_offset_bytes", "The slave's durable message-log offset (-1: no slave yet).",
			master(func(y *syncService) float64 { return float64(y.slaveMsg.Load()) }, -1)),
		gauge("qmq_realtime_slave_action_offset_bytes", "The action-log offset the slave has written (the smaller of its last two requests'; -1: no slave yet).",
			master(func(y *syncService) float64 { _, a := y.slaveWrote(); return float64(a) }, -1)),
		gauge("qmq_realtime_slave_lag_bytes", "Committed message-log bytes the slave has not copied.",
			master(func(y *syncService) float64 { return float64(y.lagBytes.Load()) }, 0)),
		gauge("qmq_realtime_slave_lag_seconds", "Age of the oldest committed bytes the slave has not copied.",
			master(func(y *syncService) float64 { return time.Duration(y.lagNanos.Load()).Seconds() }, 0)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "qmq_realtime_sync_bytes_served_total", ConstLabels: labels,
			Help: "Message-log and action-log bytes sent to the slave (this master term)."}, master(func(y *syncService) float64 { return float64(y.served.Load()) }, 0)),
		gauge("qmq_realtime_waiting_acks", "Send replies waiting for the slave's copy (--wait-slave).",
			master(func(y *syncService) float64 { return float64(y.waiting()) }, 0)),
		gauge("qmq_realtime_serving_alone", "1 while a master's replies do not wait for a slave (no eligible slave: pkg/failover).",
			master(func(y *syncService) float64 {
				if b.member.Load() != nil {
					return flag(b.gate.State() == protocol.WriteAlone)
				}
				return flag(b.opts.WaitSlave && !y.wait.Load())
			}, 0)),
		gauge("qmq_realtime_slave_lag_readonly", "1 while the group is readonly because of its slave (gone, or lagging).",
			master(func(y *syncService) float64 {
				return flag(y.readonly.Load() || b.gate.State() == protocol.WriteReadonly)
			}, 0)),
		gauge("qmq_realtime_replication_lag_bytes", "Committed master message-log bytes this slave had not copied at the last sync.",
			slave(func(y *replica) float64 { v, _ := y.lag(); return float64(v) })),
		gauge("qmq_realtime_replication_lag_seconds", "Time since this slave last held everything its master had committed.",
			slave(func(y *replica) float64 { _, d := y.lag(); return d.Seconds() })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "qmq_realtime_replication_errors_total", ConstLabels: labels,
			Help: "Sync requests that failed (connection, master refusal, bad chunk)."}, func() float64 { return float64(b.replErrors.Load()) }),
	)
}

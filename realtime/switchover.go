package realtime

import (
	"context"
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// defaultSwitchoverTimeout bounds a switchover whose request names none.
const defaultSwitchoverTimeout = 10 * time.Second

// serveSwitchover hands the group to the slave (a planned switchover,
// protocol.CmdSwitchover): the master stops writes, waits until its slave
// holds both of its logs up to its committed ends, and asks its Node to
// resign (unregister as master, then rejoin as the slave); it answers once
// unregistered. The slave's next heartbeat finds no master and wins. It
// answers with an error and keeps serving when it cannot: not a Node's
// master (StatusNotMaster), another epoch (StatusNotMaster or
// StatusStaleEpoch), no slave caught up with it (StatusUnavailable), the
// slave did not catch up in time (StatusRetryLater, writes resume), a
// switchover already under way (StatusBusy).
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
	if b.sync == nil || b.onResign == nil {
		r.ReplyError(protocol.Errorf(protocol.StatusNotMaster, "broker group "+b.opts.Group+": this broker is not an elected master"))
		return
	}
	if err := b.fenced(); err != nil {
		r.ReplyError(err)
		return
	}
	switch e := b.epoch(); {
	case q.Epoch != 0 && q.Epoch > e:
		r.ReplyError(protocol.Errorf(protocol.StatusNotMaster, fmt.Sprintf("broker group %s: asked at epoch %d, this master serves epoch %d", b.opts.Group, q.Epoch, e)))
		return
	case q.Epoch != 0 && q.Epoch < e:
		r.ReplyError(protocol.Errorf(protocol.StatusStaleEpoch, fmt.Sprintf("broker group %s: asked at epoch %d, this master serves epoch %d", b.opts.Group, q.Epoch, e)))
		return
	}
	y := b.sync
	if !y.slaveConnected() {
		r.ReplyError(protocol.Errorf(protocol.StatusUnavailable, "broker group "+b.opts.Group+": no slave holds this master's logs"))
		return
	}
	if !b.handingOver.CompareAndSwap(false, true) {
		r.ReplyError(protocol.Errorf(protocol.StatusBusy, "broker group "+b.opts.Group+": a switchover is under way"))
		return
	}
	timeout := q.Timeout
	if timeout <= 0 {
		timeout = defaultSwitchoverTimeout
	}
	b.lg.Warn("switchover: writes stop until the slave holds everything", zap.Duration("timeout", timeout))
	go func() {
		if err := b.waitSlaveHolds(timeout); err != nil {
			b.handingOver.Store(false)
			b.lg.Warn("switchover failed; serving on", zap.Error(err))
			r.ReplyError(err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := b.onResign(ctx)
		cancel()
		if err != nil {
			r.ReplyError(err)
		} else {
			r.Reply(protocol.StatusOK)
		}
		b.onResigned() // no master registration any more: rejoin as slave
	}()
}

// waitSlaveHolds waits until the slave holds the committed ends (writes
// are stopped: fenced reports handingOver). Pulls and acks that passed the
// fence just before it may still add actions: the buffered ones are
// flushed, and the ends must hold still across a second flush.
func (b *Broker) waitSlaveHolds(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	stable := false
	for {
		if err := b.store.FlushActions(); err != nil {
			return protocol.Errorf(protocol.StatusStoreError, "switchover: "+err.Error())
		}
		m, a := b.store.CommittedEnds()
		sm, sa := b.sync.slaveWrote()
		if sm >= m && sa >= a {
			if stable {
				return nil
			}
			stable = true
			time.Sleep(20 * time.Millisecond)
			continue
		}
		stable = false
		if time.Now().After(deadline) {
			return protocol.Errorf(protocol.StatusRetryLater, fmt.Sprintf(
				"broker group %s: the slave holds message %d / action %d of %d / %d after %v; writes resume", b.opts.Group, sm, sa, m, a, timeout))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// slaveConnected reports whether a slave that caught up with this master
// once has synced within the last two sync waits and a second.
func (y *syncService) slaveConnected() bool {
	return !y.alone.Load() && y.slaveMsg.Load() >= 0 &&
		time.Since(time.Unix(0, y.slaveSeen.Load())) <= 2*y.opts.SyncWait+time.Second
}

// slaveWrote returns the ends of what the slave has written: its durable
// message-log end and the smaller of its last two action offsets.
func (y *syncService) slaveWrote() (message, action int64) {
	action = y.slaveAct.Load()
	if prev := y.slaveActPrev.Load(); prev >= 0 {
		action = min(action, prev)
	}
	return y.slaveMsg.Load(), action
}

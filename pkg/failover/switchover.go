package failover

import (
	"context"
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// DefaultSwitchoverTimeout bounds a switchover whose request names none.
const DefaultSwitchoverTimeout = 10 * time.Second

// switchReq is a planned handover asked of roleLoop.
type switchReq struct {
	timeout time.Duration
	reply   chan error
}

// Switchover hands the group to its eligible slave (a planned switchover,
// protocol.CmdSwitchover): the master stops writes, waits (within timeout;
// 0: DefaultSwitchoverTimeout) until its slave holds everything, leaves its
// seat releasing the group to the slave, and becomes the slave; the slave
// wins at its next heartbeat. epoch is the master's epoch as the caller
// saw it (0: not checked). It answers once the seat is left, or with why
// not: StatusNotMaster (not the master, or at another epoch the caller
// does not know), StatusStaleEpoch (the caller's epoch is older),
// StatusUnavailable (no eligible slave connected, or the seat could not be
// left), StatusRetryLater (the slave did not catch up in time: writes
// resume), StatusBusy (a switchover is under way).
func (m *Member) Switchover(ctx context.Context, epoch uint64, timeout time.Duration) error {
	if !m.master.Load() {
		return protocol.Errorf(protocol.StatusNotMaster, "group "+m.opts.Group+": this broker is not its master")
	}
	switch mine := m.epoch.Load(); {
	case epoch != 0 && epoch > mine:
		return protocol.Errorf(protocol.StatusNotMaster, fmt.Sprintf("group %s: asked at epoch %d, this master serves epoch %d", m.opts.Group, epoch, mine))
	case epoch != 0 && epoch < mine:
		return protocol.Errorf(protocol.StatusStaleEpoch, fmt.Sprintf("group %s: asked at epoch %d, this master serves epoch %d", m.opts.Group, epoch, mine))
	}
	if timeout <= 0 {
		timeout = DefaultSwitchoverTimeout
	}
	req := &switchReq{timeout: timeout, reply: make(chan error, 1)}
	select {
	case m.switchCh <- req:
	case <-time.After(time.Second):
		return protocol.Errorf(protocol.StatusBusy, "group "+m.opts.Group+": a switchover is under way")
	case <-ctx.Done():
		return protocol.Errorf(protocol.StatusUnavailable, "switchover: "+ctx.Err().Error())
	}
	select {
	case err := <-req.reply:
		return err
	case <-ctx.Done():
		return protocol.Errorf(protocol.StatusUnavailable, "switchover: "+ctx.Err().Error())
	}
}

// switchover runs a planned handover on roleLoop.
func (m *Member) switchover(req *switchReq) {
	reg := m.mreg.Load()
	if !m.master.Load() || reg == nil {
		req.reply <- protocol.Errorf(protocol.StatusNotMaster, "group "+m.opts.Group+": this broker is not its registered master")
		return
	}
	st := m.srv.Slave()
	if !st.Connected || st.ID == "" || st.ID != m.set && st.Lag > m.opts.SlaveLagLimit {
		req.reply <- protocol.Errorf(protocol.StatusUnavailable, fmt.Sprintf(
			"group %s: no slave holds this master's logs (eligible %q, connected %q)", m.opts.Group, m.set, st.ID))
		return
	}
	m.setState(protocol.WriteHandingOver, 0, "switchover", "a switchover stopped writes until the slave holds everything")
	ctx, cancel := context.WithTimeout(context.Background(), req.timeout)
	err := m.srv.HandOver(ctx)
	cancel()
	if err == nil && m.set != st.ID {
		// A slave that caught up but is not recorded yet: it holds
		// everything and nothing is written any more, so it may be.
		m.nextSet = time.Time{}
		var ok bool
		if ok, err = m.changeSet(reg, st.ID); err == nil && !ok {
			err = fmt.Errorf("the eligible set records %q, not the slave %q", m.set, st.ID)
		}
	}
	if err != nil {
		m.lg.Warn("switchover failed; serving on", zap.Error(err))
		req.reply <- protocol.Errorf(protocol.StatusRetryLater, fmt.Sprintf(
			"group %s: the slave did not hold everything within %v; writes resume: %v", m.opts.Group, req.timeout, err))
		return
	}
	lctx, lcancel := context.WithTimeout(context.Background(), 5*time.Second)
	err = reg.Close(lctx) // releases the group to the slave
	lcancel()
	m.mreg.Store(nil)
	if err != nil {
		// Its seat may still be held: register again and serve on.
		req.reply <- protocol.Errorf(protocol.StatusUnavailable, "switchover: leaving the master seat: "+err.Error())
		m.setState(protocol.WriteFenced, 0, "not-registered", "re-registering after a switchover that could not leave the seat")
		return
	}
	req.reply <- nil
	m.lg.Warn("switchover: left the master seat; rejoining as the slave")
	m.toSlave(protocol.WriteHandingOver, "handed-over", "handed the group to its slave")
}

package delay

import (
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// defaultSwitchoverTimeout bounds a planned handover when the request
// gives no timeout.
const defaultSwitchoverTimeout = 10 * time.Second

// switchReq is a planned handover the master was asked for.
type switchReq struct {
	timeout time.Duration
	reply   func(error)
}

// serveSwitchover answers CmdSwitchover (pkg/protocol switchover.go): the
// master stops taking sends and forwarding, waits until its slave's copy
// holds everything (every hour file at its current size, acknowledged),
// unregisters as master and rejoins the group as a slave; the slave wins the
// group at its next heartbeat. The handover runs on roleLoop.
func (s *Server) serveSwitchover(r *netserver.Request) {
	q, err := protocol.DecodeSwitchoverRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if q.Group != s.opts.Group {
		r.ReplyError(protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("switchover of group %q asked of a server of delay group %q", q.Group, s.opts.Group)))
		return
	}
	m, _ := s.current()
	if m == nil {
		r.ReplyError(protocol.Errorf(protocol.StatusNotMaster, "delay group "+s.opts.Group+": this server is not the master"))
		return
	}
	if s.roles == nil || !s.opts.Failover {
		r.ReplyError(protocol.Errorf(protocol.StatusUnavailable, "delay group "+s.opts.Group+": switchover needs meta servers and failover"))
		return
	}
	switch mine := m.epoch.Load(); {
	case q.Epoch != 0 && q.Epoch > mine:
		r.ReplyError(protocol.Errorf(protocol.StatusNotMaster, fmt.Sprintf("this master serves epoch %d, the switchover names %d", mine, q.Epoch)))
		return
	case q.Epoch != 0 && q.Epoch < mine:
		r.ReplyError(protocol.Errorf(protocol.StatusStaleEpoch, fmt.Sprintf("this master serves epoch %d, the switchover names %d", mine, q.Epoch)))
		return
	}
	if !m.src.slaveConnected() {
		r.ReplyError(protocol.Errorf(protocol.StatusUnavailable, "delay group "+s.opts.Group+": no slave is copying from this master"))
		return
	}
	timeout := q.Timeout
	if timeout <= 0 {
		timeout = defaultSwitchoverTimeout
	}
	req := &switchReq{timeout: timeout, reply: func(err error) {
		if err != nil {
			r.ReplyError(err)
			return
		}
		r.Reply(protocol.StatusOK)
	}}
	select {
	case s.roles.switchCh <- req:
	default:
		r.ReplyError(protocol.Errorf(protocol.StatusBusy, "delay group "+s.opts.Group+": a switchover is under way"))
	}
}

// switchover hands the group over (on roleLoop): fence, wait until the
// slave holds everything (bounded), unregister, rejoin as a slave. When the
// slave does not catch up in time the master resumes (the next check lifts
// the fence) and the caller hears StatusRetryLater.
func (r *roles) switchover(m *master, req *switchReq) {
	m.fenced.Store(true)
	r.lg.Info("switchover: writes and forwards stopped, waiting for the slave", zap.Duration("timeout", req.timeout))
	deadline := time.Now().Add(req.timeout)
	for !m.src.slaveHoldsAll() {
		if time.Now().After(deadline) {
			r.lg.Warn("switchover: the slave did not catch up in time; resuming")
			req.reply(protocol.Errorf(protocol.StatusRetryLater, fmt.Sprintf(
				"delay group %s: the slave did not hold everything within %v; the master resumes", r.s.opts.Group, req.timeout)))
			return
		}
		select {
		case <-r.stop:
			req.reply(protocol.Errorf(protocol.StatusShuttingDown, "delay group "+r.s.opts.Group+": the server is stopping"))
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	if r.masterReg != nil {
		r.giveUp(r.masterReg) // the slave's next heartbeat finds no master
		r.masterReg = nil
	}
	req.reply(nil)
	r.lg.Info("switchover: unregistered as master; rejoining as the slave")
	r.demote(m)
}

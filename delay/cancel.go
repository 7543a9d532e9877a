package delay

import (
	"fmt"

	"github.com/qmq-go/qmq/delay/store"
	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// serveCancel cancels scheduled messages on a master (CmdScheduleCancel):
// each target gets its own status — OK (cancelled), AlreadyFired, NotFound,
// Invalid, Forbidden (the identity may not publish to its subject) — once
// the cancel is durable, and with WaitSlave once the slave holds it, so a
// message answered cancelled is not forwarded by a slave that takes over.
// serveReschedule (CmdScheduleReschedule) is the same for new due times
// (also Invalid for a time not after now, BeyondHorizon).
func (s *Server) serveCancel(r *netserver.Request) { s.serveControl(r, false) }

func (s *Server) serveReschedule(r *netserver.Request) { s.serveControl(r, true) }

func (s *Server) serveControl(r *netserver.Request, reschedule bool) {
	if s.life.Closing() {
		r.ReplyError(protocol.Errorf(protocol.StatusShuttingDown, "delay group "+s.opts.Group+" is shutting down"))
		return
	}
	m, _ := s.current()
	if m == nil {
		r.ReplyError(protocol.Errorf(protocol.StatusNotMaster, "delay group "+s.opts.Group+": this server is a slave"))
		return
	}
	m.serveControl(r, reschedule)
}

func (m *master) serveControl(r *netserver.Request, reschedule bool) {
	if !m.s.gate.Open() {
		r.ReplyError(m.s.gate.Err())
		return
	}
	if err := m.src.admit(); err != nil {
		r.ReplyError(err)
		return
	}
	var req protocol.ScheduleRescheduleRequest
	var err error
	if reschedule {
		req, err = protocol.DecodeScheduleRescheduleRequest(r.Body)
	} else {
		var c protocol.ScheduleCancelRequest
		c, err = protocol.DecodeScheduleCancelRequest(r.Body)
		req.Epoch, req.Targets = c.Epoch, c.Targets
	}
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if mine := m.epoch.Load(); mine != 0 && req.Epoch > mine {
		r.ReplyError(protocol.Errorf(protocol.StatusNotMaster, fmt.Sprintf(
			"delay group %s: the request names epoch %d, this master serves %d", m.s.opts.Group, req.Epoch, mine)))
		return
	}
	statuses := make([]protocol.Status, len(req.Targets))
	targets, index := m.cancellable(r, req.Targets, statuses)
	if len(targets) == 0 {
		r.Reply(protocol.StatusOK, protocol.AppendSendResponse(nil, statuses))
		return
	}
	reply := func(results []store.Result) {
		cancelled := false
		for j, res := range results {
			st := protocol.StatusOf(res.Err)
			if st == protocol.StatusInternal {
				st = protocol.StatusStoreError
			}
			statuses[index[j]] = st
			cancelled = cancelled || st == protocol.StatusOK
			if reschedule {
				m.s.metrics.reschedules.WithLabelValues(st.String()).Inc()
			} else {
				m.s.metrics.cancels.WithLabelValues(st.String()).Inc()
			}
		}
		if !m.s.opts.WaitSlave && !m.s.gate.Open() {
			r.ReplyError(m.s.gate.Err())
			return
		}
		if !cancelled || !m.src.wait.Load() {
			r.Reply(protocol.StatusOK, protocol.AppendSendResponse(nil, statuses))
			return
		}
		// The cancel records lie below the log's end now; the slave holds
		// their dispatch entries once its copy covers a manifest replayed
		// that far.
		m.src.await(m.store.LogEnd(), func(err error) {
			if err != nil {
				r.ReplyError(err)
				return
			}
			r.Reply(protocol.StatusOK, protocol.AppendSendResponse(nil, statuses))
		})
	}
	if !reschedule {
		m.store.Cancel(targets, reply)
		return
	}
	dues := make([]int64, len(targets))
	for j, i := range index {
		dues[j] = req.Dues[i]
	}
	m.store.Reschedule(targets, dues, reply)
}

// cancellable returns the targets the connection's identity may cancel
// (those it may publish to) and the index of each in the request; the
// others are answered StatusForbidden in statuses.
func (m *master) cancellable(r *netserver.Request, targets []protocol.ScheduleTarget, statuses []protocol.Status) ([]protocol.ScheduleTarget, []int) {
	check := auth.NewPublishCheck(r.Conn.Principal())
	kept := make([]protocol.ScheduleTarget, 0, len(targets))
	index := make([]int, 0, len(targets))
	for i, t := range targets {
		if !check.Allowed([]byte(t.Subject)) {
			statuses[i] = protocol.StatusForbidden
			r.NoteRefusal(protocol.StatusForbidden, "cancel on "+t.Subject)
			continue
		}
		kept, index = append(kept, t), append(index, i)
	}
	return kept, index
}

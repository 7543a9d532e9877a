package metaserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
	"go.uber.org/zap"
)

// A planned switchover hands a group from its master to its slave:
//
//  1. The meta server checks its view: the group must have a live master
//     and a slave, and no other switchover of the group may be under way.
//  2. It relays protocol.CmdSwitchover to the master, naming the master's
//     epoch (so a broker that is no longer that master refuses) and a
//     handover timeout: two thirds of the switchover's. The master stops
//     writes, waits until its slave holds its committed ends, unregisters
//     and rejoins as a slave, then answers.
//  3. The meta server waits, on its view, until a different broker holds
//     the group's master seat at a larger epoch: the slave, whose next
//     heartbeat finds no master and wins the election.
//
// The answer names the old and the new master and their epochs. When the
// master refuses (no connected slave, a slave that did not catch up, an
// epoch it does not serve in) the group keeps its master and the error says
// why; when the master does not answer, the meta server still watches for
// a new master until the timeout, since the handover may have happened.

// Switchover errors, each with its HTTP status (switchoverStatus).
var (
	// errSwitchoverBusy: another switchover of the group is under way here.
	errSwitchoverBusy = errors.New("a switchover of this group is already under way")
	// errNoSlave: the group has no slave to hand over to.
	errNoSlave = errors.New("no slave")
	// errNoMasterSeat: the group has no live master to hand over from.
	errNoMasterSeat = errors.New("no live master")
	// errSwitchoverRefused: the master answered with an error and keeps
	// the group.
	errSwitchoverRefused = errors.New("master refused the switchover")
	// errSwitchoverUnsupported: the master does not know CmdSwitchover.
	errSwitchoverUnsupported = errors.New("master does not support switchover")
	// errMasterUnreachable: the request could not be sent to the master.
	errMasterUnreachable = errors.New("cannot reach the master")
	// errSwitchoverTimeout: no new master within the timeout.
	errSwitchoverTimeout = errors.New("switchover did not complete in time")
)

// Bounds of a switchover's timeout.
const (
	minSwitchoverTimeout = time.Second
	maxSwitchoverTimeout = 10 * time.Minute
)

// switchoverStatus maps a switchover error to its HTTP status; 0 when err is
// not one.
func switchoverStatus(err error) int {
	switch {
	case errors.Is(err, errSwitchoverBusy), errors.Is(err, errNoSlave), errors.Is(err, errNoMasterSeat),
		errors.Is(err, errSwitchoverRefused), errors.Is(err, errForceRefused):
		return http.StatusConflict
	case errors.Is(err, errSwitchoverUnsupported):
		return http.StatusNotImplemented
	case errors.Is(err, errMasterUnreachable):
		return http.StatusBadGateway
	case errors.Is(err, errSwitchoverTimeout):
		return http.StatusGatewayTimeout
	}
	return 0
}

func (s *Server) postSwitchover(r *http.Request) (any, error) {
	var in api.SwitchoverRequest
	if err := decodeBody(r, &in); err != nil {
		return nil, err
	}
	timeout := time.Duration(in.TimeoutMillis) * time.Millisecond
	if in.TimeoutMillis == 0 {
		timeout = api.DefaultSwitchoverTimeout
	}
	if timeout < minSwitchoverTimeout || timeout > maxSwitchoverTimeout {
		return nil, fmt.Errorf("%w: timeoutMillis %d is outside [%d, %d]", errBadInput, in.TimeoutMillis,
			minSwitchoverTimeout.Milliseconds(), maxSwitchoverTimeout.Milliseconds())
	}
	res, err := s.switchover(r.Context(), r.PathValue("group"), timeout)
	s.metrics.switchover(err)
	return res, err
}

// switchover hands group from its master to its slave within timeout.
func (s *Server) switchover(ctx context.Context, group string, timeout time.Duration) (api.Switchover, error) {
	start := time.Now()
	res := api.Switchover{Group: group}
	if !protocol.IsName(group) {
		return res, protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("group %q must be A-Z a-z 0-9 . _ -", group))
	}
	if !s.startSwitchover(group) {
		return res, fmt.Errorf("group %s: %w", group, errSwitchoverBusy)
	}
	defer s.endSwitchover(group)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	defer context.AfterFunc(s.closing, cancel)()

	v := s.view
	v.mu.RLock()
	g := v.groupLocked(group)
	v.mu.RUnlock()
	switch {
	case g.master == nil && g.slave == nil:
		return res, protocol.Errorf(protocol.StatusNotFound, fmt.Sprintf("broker group %q is not registered", group))
	case g.master == nil:
		return res, fmt.Errorf("group %s: %w to hand over from (the group is unavailable; its slave takes over by itself when it sees no master)", group, errNoMasterSeat)
	case g.slave == nil:
		return res, fmt.Errorf("group %s: %w to hand over to: start a slave and wait until it has caught up", group, errNoSlave)
	}
	res.From = seat(g.master)
	lg := s.lg.With(zap.String("group", group), zap.String("master", g.master.BrokerID), zap.Uint64("epoch", g.master.Epoch),
		zap.String("slave", g.slave.BrokerID))
	lg.Info("switchover: asking the master to hand over")

	handover := timeout * 2 / 3
	body := protocol.AppendSwitchoverRequest(nil, &protocol.SwitchoverRequest{Group: group, Epoch: g.master.Epoch, Timeout: handover})
	// The call may last the whole handover: one second more than the
	// broker's bound, and never past the switchover's own deadline.
	_, err := s.callFor(ctx, res.From.Address, protocol.CmdSwitchover, body, handover+time.Second)
	s.metrics.relayed.WithLabelValues(protocol.CmdSwitchover.String()).Inc()
	var pe *protocol.Error
	switch {
	case err == nil:
	case errors.Is(err, protocol.ErrUnknownCommand):
		return res, fmt.Errorf("group %s: %w: broker %s answered %v", group, errSwitchoverUnsupported, seatName(res.From), err)
	case errors.As(err, &pe):
		return res, fmt.Errorf("group %s: %w: broker %s (epoch %d) keeps the group: %w", group, errSwitchoverRefused, seatName(res.From), res.From.Epoch, err)
	case transport.NotSent(err):
		return res, fmt.Errorf("group %s: %w %s: %w", group, errMasterUnreachable, seatName(res.From), err)
	default:
		// No answer: the master may have handed over all the same.
		lg.Warn("switchover: no answer from the master; watching for a new one", zap.Error(err))
	}

	ng, werr := s.waitGroup(ctx, group, func(g groupView) bool {
		return g.master != nil && g.master.BrokerID != res.From.BrokerID && g.master.Epoch > res.From.Epoch
	})
	if werr != nil && s.closing.Err() != nil {
		return res, fmt.Errorf("group %s: %w: the meta server is closing; the switchover stopped watching: %s", group, protocol.ErrShuttingDown, stuckReason(ng, res.From, err))
	}
	if werr != nil {
		return res, fmt.Errorf("group %s: %w after %v: %s", group, errSwitchoverTimeout, timeout, stuckReason(ng, res.From, err))
	}
	res.To = seat(ng.master)
	res.TookMillis = time.Since(start).Milliseconds()
	lg.Info("switchover: done", zap.String("newMaster", res.To.BrokerID), zap.Uint64("newEpoch", res.To.Epoch),
		zap.Duration("took", time.Since(start)))
	return res, nil
}

// stuckReason says where a switchover that timed out stands.
func stuckReason(g groupView, from api.Seat, callErr error) string {
	var why string
	switch {
	case g.master == nil:
		why = fmt.Sprintf("master %s unregistered but no broker has won the election yet: the group is unavailable until one does", from.BrokerID)
	case g.master.BrokerID == from.BrokerID && g.master.Epoch == from.Epoch:
		why = fmt.Sprintf("%s still holds the master seat at epoch %d", from.BrokerID, from.Epoch)
	case g.master.BrokerID == from.BrokerID:
		why = fmt.Sprintf("%s took the master seat back at epoch %d", from.BrokerID, g.master.Epoch)
	default:
		why = fmt.Sprintf("%s holds the master seat at epoch %d, not above %d", g.master.BrokerID, g.master.Epoch, from.Epoch)
	}
	if callErr != nil {
		why += fmt.Sprintf(" (the master did not answer: %v)", callErr)
	}
	return why
}

// seatName names a broker for people: "id at address", or the address
// alone when it is the id.
func seatName(st api.Seat) string {
	if st.BrokerID == st.Address {
		return st.Address
	}
	return st.BrokerID + " at " + st.Address
}

func seat(r *brokerRecord) api.Seat {
	return api.Seat{BrokerID: r.BrokerID, Address: r.Address, Epoch: r.Epoch}
}

func (s *Server) startSwitchover(group string) bool {
	s.switchMu.Lock()
	defer s.switchMu.Unlock()
	if s.switching == nil {
		s.switching = map[string]bool{}
	}
	if s.switching[group] {
		return false
	}
	s.switching[group] = true
	return true
}

func (s *Server) endSwitchover(group string) {
	s.switchMu.Lock()
	defer s.switchMu.Unlock()
	delete(s.switching, group)
}

// callFor sends one request to addr and waits up to timeout for the answer
// (the transport's own RequestTimeout, meant for quick admin requests, does
// not bound it), or until ctx ends.
func (s *Server) callFor(ctx context.Context, addr string, cmd protocol.Command, body []byte, timeout time.Duration) ([]byte, error) {
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	type answer struct {
		body []byte
		err  error
	}
	ch := make(chan answer, 1)
	if err := s.caller.Go(addr, cmd, body, timeout, func(b []byte, err error) { ch <- answer{b, err} }); err != nil {
		return nil, err
	}
	select {
	case a := <-ch:
		return a.body, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// waitGroup waits until cond holds for group in the view, and returns the
// group as last seen (also when ctx ends first, with ctx's error).
func (s *Server) waitGroup(ctx context.Context, group string, cond func(groupView) bool) (groupView, error) {
	v := s.view
	for {
		v.mu.RLock()
		g, ch := v.groupLocked(group), v.changed
		v.mu.RUnlock()
		if cond(g) {
			return g, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return g, ctx.Err()
		}
	}
}

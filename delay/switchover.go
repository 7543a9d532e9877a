package delay

import (
	"context"
	"fmt"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// serveSwitchover answers CmdSwitchover (pkg/protocol switchover.go): the
// role loop stops sends and forwards, waits until the slave's copy holds
// everything (every hour file at its current size, acknowledged), leaves
// the master seat releasing the group to the slave and rejoins as its
// slave (failover.Member.Switchover); the slave wins at its next heartbeat.
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
	if m, _ := s.current(); m == nil {
		r.ReplyError(protocol.Errorf(protocol.StatusNotMaster, "delay group "+s.opts.Group+": this server is not the master"))
		return
	}
	if s.member.Load() == nil || !s.opts.Failover {
		r.ReplyError(protocol.Errorf(protocol.StatusUnavailable, "delay group "+s.opts.Group+": switchover needs meta servers and failover"))
		return
	}
	go func() {
		if err := s.member.Load().Switchover(context.Background(), q.Epoch, q.Timeout); err != nil {
			r.ReplyError(err)
			return
		}
		r.Reply(protocol.StatusOK)
	}()
}

package realtime

import (
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/realtime/store"
)

// serveConsumerManage resets a group's offset or takes a consumer offline
// or online (relayed by the meta server from qmqctl or the console).
func (b *Broker) serveConsumerManage(r *netserver.Request) {
	q, err := protocol.DecodeConsumerManageRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	if err := b.limits.CheckGroup(q.Group); err != nil {
		r.ReplyError(err)
		return
	}
	switch q.Action {
	case protocol.ManageResetEarliest, protocol.ManageResetLatest, protocol.ManageResetTime:
		kind := map[protocol.ManageAction]store.ResetKind{
			protocol.ManageResetEarliest: store.ResetEarliest,
			protocol.ManageResetLatest:   store.ResetLatest,
			protocol.ManageResetTime:     store.ResetTime,
		}[q.Action]
		if _, err := b.st().ResetGroup(q.Subject, q.Group, kind, q.Time); err != nil {
			r.ReplyError(pullStatus(err))
			return
		}
		b.actorFor(actorKey{q.Subject, q.Group}).wakeAlways()
	case protocol.ManageConsumerOffline:
		b.live.setOffline(consumerKey{q.Subject, q.Group, q.Consumer}, true)
		b.release(q.Subject, q.Group, q.Consumer, "taken offline")
	case protocol.ManageConsumerOnline:
		b.live.setOffline(consumerKey{q.Subject, q.Group, q.Consumer}, false)
	}
	r.Reply(protocol.StatusOK)
}

// serveBrokerStats reports subjects (with their in-rates), groups (with
// their out-rates; both as of the last heartbeat report, subjectrates.go),
// consumers and backlog.
func (b *Broker) serveBrokerStats(r *netserver.Request) {
	q, err := protocol.DecodeBrokerStatsRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	st := b.st().Stats()
	resp := protocol.BrokerStatsResponse{Time: time.Now(), StoredBytes: uint64(max(st.MessageLogEnd-st.MessageLogStart, 0))}
	groups := map[string][]protocol.GroupStats{}
	for _, g := range st.Groups {
		if g.Broadcast || (q.Group != "" && g.Group != q.Group) {
			continue
		}
		gs := protocol.GroupStats{Group: g.Group, Cursor: uint64(max(g.Cursor, 0)), Backlog: uint64(max(g.Backlog, 0)),
			OutPerSec: b.subjRates.outPerSec(g.Subject, g.Group)}
		for _, c := range g.Consumers {
			cs := protocol.ConsumerStats{Consumer: c.ID, Unacked: uint64(max(c.Unacked, 0)), LastSeen: c.LastSeen}
			if b.offline(g.Subject, g.Group, c.ID) {
				cs.Flags |= protocol.ConsumerOffline
			}
			gs.Backlog += cs.Unacked
			gs.Consumers = append(gs.Consumers, cs)
		}
		groups[g.Subject] = append(groups[g.Subject], gs)
	}
	// A dead subject's letters are answered as its group's backlog there
	// (deadcount.go).
	asked := st.Subjects
	if q.Subject != "" {
		asked = nil
		for _, s := range st.Subjects {
			if s.Subject == q.Subject {
				asked = append(asked, s)
			}
		}
	}
	for subject, n := range b.deadLetterCounts(asked) {
		_, _, group, _ := protocol.ParseSystemSubject(subject)
		if q.Group == "" || q.Group == group {
			groups[subject] = append(groups[subject], protocol.GroupStats{Group: group, Backlog: uint64(n)})
		}
	}
	for _, s := range st.Subjects {
		if q.Subject != "" && s.Subject != q.Subject {
			continue
		}
		resp.Subjects = append(resp.Subjects, protocol.SubjectStats{Subject: s.Subject, Messages: uint64(max(s.NextSeq, 0)),
			InPerSec: b.subjRates.inPerSec(s.Subject), Groups: groups[s.Subject]})
	}
	r.Reply(protocol.StatusOK, protocol.AppendBrokerStatsResponse(nil, &resp))
}

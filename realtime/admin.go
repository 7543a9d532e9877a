package realtime

import (
	"errors"
	"fmt"
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
		if _, err := b.store.ResetGroup(q.Subject, q.Group, kind, q.Time); err != nil {
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

// serveBrokerStats reports subjects, groups, consumers and backlog.
func (b *Broker) serveBrokerStats(r *netserver.Request) {
	q, err := protocol.DecodeBrokerStatsRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	st := b.store.Stats()
	resp := protocol.BrokerStatsResponse{Time: time.Now(), StoredBytes: uint64(max(st.MessageLogEnd-st.MessageLogStart, 0))}
	groups := map[string][]protocol.GroupStats{}
	for _, g := range st.Groups {
		if g.Broadcast || (q.Group != "" && g.Group != q.Group) {
			continue
		}
		gs := protocol.GroupStats{Group: g.Group, Cursor: uint64(max(g.Cursor, 0)), Backlog: uint64(max(g.Backlog, 0))}
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
	for _, s := range st.Subjects {
		if q.Subject != "" && s.Subject != q.Subject {
			continue
		}
		resp.Subjects = append(resp.Subjects, protocol.SubjectStats{Subject: s.Subject, Messages: uint64(max(s.NextSeq, 0)), Groups: groups[s.Subject]})
	}
	r.Reply(protocol.StatusOK, protocol.AppendBrokerStatsResponse(nil, &resp))
}

// serveDeadLetters lists and inspects a group's dead letters. Re-drive and
// purge are not served yet.
func (b *Broker) serveDeadLetters(r *netserver.Request) {
	q, err := protocol.DecodeDeadLettersRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	dead := protocol.DeadSubject(q.Subject, q.Group)
	switch q.Action {
	case protocol.DeadLettersList, protocol.DeadLettersInspect:
	default:
		r.ReplyError(protocol.Errorf(protocol.StatusUnknownCommand, fmt.Sprintf("dead-letter action %v is not served by this broker yet", q.Action)))
		return
	}
	max := int(q.Max)
	if max <= 0 || max > 1000 {
		max = 1000
	}
	from := int64(q.After)
	if from > 0 {
		from++ // sequences after After
	}
	msgs, err := b.store.Read(dead, from, max)
	if err != nil && !errors.Is(err, store.ErrUnknownSubject) {
		r.ReplyError(pullStatus(err))
		return
	}
	resp := protocol.DeadLettersResponse{}
	want := map[string]bool{}
	for _, id := range q.IDs {
		want[id] = true
	}
	for _, m := range msgs {
		if len(want) > 0 {
			v, err := protocol.ParseMessage(m.Message)
			if err != nil || !want[string(v.ID)] {
				continue
			}
		}
		resp.Letters = append(resp.Letters, protocol.DeadLetter{Seq: uint64(m.ConsumeSeq), Message: m.Message})
	}
	for _, s := range b.store.Stats().Subjects {
		if s.Subject == dead {
			resp.Total = uint64(s.Entries)
		}
	}
	r.Reply(protocol.StatusOK, protocol.AppendDeadLettersResponse(nil, &resp))
}

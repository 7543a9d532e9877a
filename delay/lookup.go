package delay

import (
	"github.com/qmq-go/qmq/delay/store"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// serveFindMessages answers CmdFindMessages on a master: the scheduled
// messages of the request's subject with its id, or with its value as
// schedule key (store.Find: pending, cancelled or rescheduled, fired), each
// flagged FoundScheduled with its due time as Stored and its record's hour
// file and offset as Seq and Offset. By id a request may name no subject
// (the id index spans subjects); by schedule key it must (a request without
// one finds nothing here). Admin read; bodies only for identities that may
// read them.
func (s *Server) serveFindMessages(r *netserver.Request) {
	q, err := protocol.DecodeFindMessagesRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	var resp protocol.FindMessagesResponse
	if q.Subject == "" && q.By != protocol.FindByID {
		r.Reply(protocol.StatusOK, protocol.AppendFindMessagesResponse(nil, &resp))
		return
	}
	m, _ := s.current()
	if m == nil {
		r.ReplyError(protocol.Errorf(protocol.StatusNotMaster, "delay group "+s.opts.Group+": this server is a slave"))
		return
	}
	found, err := m.store.Find(protocol.ScheduleTarget{Subject: q.Subject, Key: q.Value, ByID: q.By == protocol.FindByID})
	if err != nil {
		r.ReplyError(err)
		return
	}
	bodies := r.Conn.Principal().CanReadBodies()
	for _, f := range found {
		fm := protocol.FoundMessage{Offset: f.Offset, Seq: f.Hour, Stored: f.Due, Flags: protocol.FoundScheduled, Message: f.Message}
		switch f.State {
		case store.ScheduleCancelled:
			fm.Flags |= protocol.FoundCancelled
		case store.ScheduleFired:
			fm.Flags |= protocol.FoundFired
		}
		if !bodies {
			msg, err := protocol.DecodeMessage(f.Message)
			if err != nil {
				continue // never send a body the caller may not read
			}
			msg.Body = nil
			if fm.Message, err = protocol.AppendMessage(nil, msg, s.limits); err != nil {
				continue
			}
			fm.Flags |= protocol.FoundBodyHidden
		}
		resp.Messages = append(resp.Messages, fm)
	}
	r.Reply(protocol.StatusOK, protocol.AppendFindMessagesResponse(nil, &resp))
}

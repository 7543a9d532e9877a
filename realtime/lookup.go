package realtime

import (
	"errors"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/realtime/store"
)

// serveFindMessages answers CmdFindMessages from the store's message index
// (store/msgindex.go): the stored messages with an id (the original and its
// retry and dead-letter copies) or a key (protocol.PropKey), oldest first.
// Admin read; an identity that may not read bodies gets each message
// re-encoded with an empty body and FoundBodyHidden set. Each message on a
// subject consumer groups pull (not a dead letter) says where it stands in
// each of them (store.Deliveries). No match is an
// empty answer, not an error (the meta server asks every group).
func (b *Broker) serveFindMessages(r *netserver.Request) {
	q, err := protocol.DecodeFindMessagesRequest(r.Body)
	if err != nil {
		r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
		return
	}
	var found []store.Found
	if q.By == protocol.FindByID {
		found, err = b.st().Lookup().ByID(q.Value)
	} else {
		found, err = b.st().Lookup().ByKey(q.Value)
	}
	if errors.Is(err, store.ErrNoIndex) {
		r.ReplyError(protocol.Errorf(protocol.StatusUnknownCommand, "this broker keeps no message index"))
		return
	}
	if errors.Is(err, store.ErrIndexBehind) {
		// A slave copying its master's index runs, or one just promoted
		// still indexing the log past them: ask again (or ask the master).
		r.ReplyError(protocol.Errorf(protocol.StatusRetryLater, err.Error()))
		return
	}
	if err != nil {
		r.ReplyError(pullStatus(err))
		return
	}
	bodies := r.Conn.Principal().CanReadBodies()
	var resp protocol.FindMessagesResponse
	for _, f := range found {
		fm := protocol.FoundMessage{Offset: f.Offset, Seq: f.Seq, Stored: f.Stored.UnixMilli(), Message: f.Message}
		if kind, _, _, system := protocol.ParseSystemSubject(f.Subject); !system || kind == protocol.KindRetry {
			fm.Deliveries = b.deliveries(f.Subject, f.Seq)
		}
		if !bodies {
			m, err := protocol.DecodeMessage(f.Message)
			if err != nil {
				continue // never send a body the caller may not read
			}
			m.Body = nil
			if fm.Message, err = protocol.AppendMessage(nil, m, b.limits); err != nil {
				continue
			}
			fm.Flags = protocol.FoundBodyHidden
		}
		resp.Messages = append(resp.Messages, fm)
	}
	r.Reply(protocol.StatusOK, protocol.AppendFindMessagesResponse(nil, &resp))
}

// deliveries reports where the message at seq of subject stands in each of
// its consumer groups (none when they cannot be read: a lookup still
// answers where it is stored).
func (b *Broker) deliveries(subject string, seq int64) []protocol.GroupDelivery {
	ds, err := b.st().Lookup().Deliveries(subject, seq)
	if err != nil {
		return nil
	}
	out := make([]protocol.GroupDelivery, 0, len(ds))
	for _, d := range ds {
		gd := protocol.GroupDelivery{Group: d.Group, Consumer: d.Consumer, PullSeq: d.PullSeq}
		switch d.State {
		case store.DeliveryWaiting:
			gd.State = protocol.DeliveryWaiting
		case store.DeliveryUnacked:
			gd.State, gd.LastSeen = protocol.DeliveryUnacked, d.LastSeen.UnixMilli()
		default:
			gd.State = protocol.DeliveryDone
		}
		out = append(out, gd)
	}
	return out
}

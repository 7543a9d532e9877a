package protocol

import (
	"encoding/binary"
	"fmt"
)

// PropKey is the property that carries a message's business key (an order
// number, say), set by the producer: realtime brokers index it, so the
// messages of a key can be looked up (CmdFindMessages).
const PropKey = "qmq.key"

// CmdFindMessages asks a realtime broker for the messages it stores with a
// message id or a key (FindMessagesRequest → FindMessagesResponse). Admin
// read; bodies only for identities that may read bodies.
const CmdFindMessages Command = 19

// FindBy says what a FindMessagesRequest names.
type FindBy uint8

const (
	// FindByID: the value is a message id; the answer holds the original
	// and every retry or dead-letter copy the broker stores.
	FindByID FindBy = 1
	// FindByKey: the value is a key (PropKey).
	FindByKey FindBy = 2
)

// FindMessagesRequest (CmdFindMessages):
//
//	by u8 | value s16 | [subject s8]
//
// Subject (optional, left out when empty) names the subject a delay server
// looks in: its index is by subject, so it finds scheduled messages only
// for a request that names one (by id, or by schedule key). Realtime
// brokers ignore it.
type FindMessagesRequest struct {
	By      FindBy
	Value   string
	Subject string
}

// FoundMessage is one stored message a broker found.
//
//	offset i64 | seq i64 | stored ms i64 | flags u8 | len u32 | message |
//	delivery count u16 | count × (group s8 | state u8 | consumer s8 |
//	  pull seq i64 | last seen ms i64)
//
// flags bit0 (FoundBodyHidden): the caller may not read bodies, and the
// message was re-encoded with an empty body. The subject is the message's
// own (a retry or dead-letter subject for copies).
type FoundMessage struct {
	Offset     int64
	Seq        int64
	Stored     int64 // Unix ms
	Flags      uint8
	Message    []byte
	Deliveries []GroupDelivery
}

// GroupDelivery is where a found message stands in one consumer group of
// the subject it is stored under (none for dead letters).
type GroupDelivery struct {
	Group    string
	State    DeliveryState
	Consumer string // DeliveryUnacked: who holds it
	PullSeq  int64  // DeliveryUnacked: its pull sequence there
	LastSeen int64  // DeliveryUnacked: the consumer's last activity, Unix ms
}

// DeliveryState says where a message stands in a consumer group.
type DeliveryState uint8

const (
	// DeliveryWaiting: the group has not taken it yet.
	DeliveryWaiting DeliveryState = 1
	// DeliveryUnacked: a consumer took it and has not acked it.
	DeliveryUnacked DeliveryState = 2
	// DeliveryDone: the group took it and no consumer holds it: acked,
	// or skipped by the group's tag filter.
	DeliveryDone DeliveryState = 3
)

func (s DeliveryState) String() string {
	switch s {
	case DeliveryWaiting:
		return "waiting"
	case DeliveryUnacked:
		return "unacked"
	case DeliveryDone:
		return "acked"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// FoundMessage.Flags. FoundBodyHidden: the body was left out. A delay
// server's answer (a scheduled message; Offset is its record's offset in
// the hour file Seq names, Unix hours; Stored is its due time) carries
// FoundScheduled and, when it will not be delivered as scheduled any more,
// FoundCancelled (cancelled, or rescheduled: another record holds it) or,
// once it has been or is being forwarded, FoundFired.
const (
	FoundBodyHidden uint8 = 1 << 0
	FoundScheduled  uint8 = 1 << 1
	FoundCancelled  uint8 = 1 << 2
	FoundFired      uint8 = 1 << 3
)

// FindMessagesResponse: count u32 | count × FoundMessage, oldest first.
type FindMessagesResponse struct {
	Messages []FoundMessage
}

// AppendFindMessagesRequest appends the body of q.
func AppendFindMessagesRequest(dst []byte, q *FindMessagesRequest) []byte {
	dst = append(dst, byte(q.By))
	dst = appendString16(dst, q.Value)
	if q.Subject != "" {
		dst = appendString8(dst, q.Subject)
	}
	return dst
}

// DecodeFindMessagesRequest decodes a find-messages request body.
func DecodeFindMessagesRequest(body []byte) (FindMessagesRequest, error) {
	r := reader{b: body}
	q := FindMessagesRequest{By: FindBy(r.u8())}
	q.Value = string(r.bytes16())
	if r.err == nil && r.off < len(r.b) {
		q.Subject = r.string8()
	}
	if err := r.done(); err != nil {
		return FindMessagesRequest{}, fmt.Errorf("%w: find messages request", err)
	}
	if q.By != FindByID && q.By != FindByKey {
		return FindMessagesRequest{}, fmt.Errorf("find messages: unknown kind %d", q.By)
	}
	if q.Value == "" {
		return FindMessagesRequest{}, fmt.Errorf("find messages: empty value")
	}
	return q, nil
}

// AppendFindMessagesResponse appends the body of r.
func AppendFindMessagesResponse(dst []byte, r *FindMessagesResponse) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(r.Messages)))
	for _, m := range r.Messages {
		dst = binary.BigEndian.AppendUint64(dst, uint64(m.Offset))
		dst = binary.BigEndian.AppendUint64(dst, uint64(m.Seq))
		dst = binary.BigEndian.AppendUint64(dst, uint64(m.Stored))
		dst = append(dst, m.Flags)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(m.Message)))
		dst = append(dst, m.Message...)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(m.Deliveries)))
		for _, d := range m.Deliveries {
			dst = appendString8(dst, d.Group)
			dst = append(dst, byte(d.State))
			dst = appendString8(dst, d.Consumer)
			dst = binary.BigEndian.AppendUint64(dst, uint64(d.PullSeq))
			dst = binary.BigEndian.AppendUint64(dst, uint64(d.LastSeen))
		}
	}
	return dst
}

// DecodeFindMessagesResponse decodes a find-messages response body.
func DecodeFindMessagesResponse(body []byte) (FindMessagesResponse, error) {
	r := reader{b: body}
	n := r.u32()
	var out FindMessagesResponse
	for i := uint32(0); i < n && r.err == nil; i++ {
		m := FoundMessage{Offset: int64(r.u64()), Seq: int64(r.u64()), Stored: int64(r.u64()), Flags: r.u8()}
		m.Message = r.bytes32()
		nd := r.u16()
		for j := uint16(0); j < nd && r.err == nil; j++ {
			m.Deliveries = append(m.Deliveries, GroupDelivery{Group: r.string8(), State: DeliveryState(r.u8()), Consumer: r.string8(),
				PullSeq: int64(r.u64()), LastSeen: int64(r.u64())})
		}
		out.Messages = append(out.Messages, m)
	}
	if err := r.done(); err != nil {
		return FindMessagesResponse{}, fmt.Errorf("%w: find messages response", err)
	}
	return out, nil
}

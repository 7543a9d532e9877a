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
//	by u8 | value s16
type FindMessagesRequest struct {
	By    FindBy
	Value string
}

// FoundMessage is one stored message a broker found.
//
//	offset i64 | seq i64 | stored ms i64 | flags u8 | len u32 | message
//
// flags bit0 (FoundBodyHidden): the caller may not read bodies, and the
// message was re-encoded with an empty body. The subject is the message's
// own (a retry or dead-letter subject for copies).
type FoundMessage struct {
	Offset  int64
	Seq     int64
	Stored  int64 // Unix ms
	Flags   uint8
	Message []byte
}

// FoundBodyHidden in FoundMessage.Flags: the body was left out.
const FoundBodyHidden uint8 = 1 << 0

// FindMessagesResponse: count u32 | count × FoundMessage, oldest first.
type FindMessagesResponse struct {
	Messages []FoundMessage
}

// AppendFindMessagesRequest appends the body of q.
func AppendFindMessagesRequest(dst []byte, q *FindMessagesRequest) []byte {
	dst = append(dst, byte(q.By))
	return appendString16(dst, q.Value)
}

// DecodeFindMessagesRequest decodes a find-messages request body.
func DecodeFindMessagesRequest(body []byte) (FindMessagesRequest, error) {
	r := reader{b: body}
	q := FindMessagesRequest{By: FindBy(r.u8())}
	q.Value = string(r.bytes16())
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
		out.Messages = append(out.Messages, m)
	}
	if err := r.done(); err != nil {
		return FindMessagesResponse{}, fmt.Errorf("%w: find messages response", err)
	}
	return out, nil
}

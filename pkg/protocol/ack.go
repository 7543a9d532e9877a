package protocol

import (
	"encoding/binary"
	"fmt"
)

// AckRequest body (CmdAck):
//
//	subject len u8 | subject | group len u8 | group | consumer len u8 | consumer
//	flags u8 | first pull seq u64 | last pull seq u64
//
// flags: bit0 broadcast; bit1 release: the consumer is leaving, so the broker
// hands its un-acked entries above last back to the group at once instead of
// after the consumer timeout. The range is inclusive; first > last acks
// nothing and serves as a heartbeat. Acks above a gap send the gap's entries to the
// group's retry subject (they were delivered and their ack was lost).
// The response has an empty body.

// Ack request flags.
const (
	AckBroadcast uint8 = 1 << 0
	AckRelease   uint8 = 1 << 1
)

// AckRequest acknowledges pull sequences [First, Last] of one consumer.
type AckRequest struct {
	Subject    string
	Group      string
	ConsumerID string
	Flags      uint8
	First      uint64
	Last       uint64
}

// AppendAckRequest appends the body of a.
func AppendAckRequest(dst []byte, a *AckRequest) []byte {
	dst = appendString8(dst, a.Subject)
	dst = appendString8(dst, a.Group)
	dst = appendString8(dst, a.ConsumerID)
	dst = append(dst, a.Flags)
	dst = binary.BigEndian.AppendUint64(dst, a.First)
	return binary.BigEndian.AppendUint64(dst, a.Last)
}

// DecodeAckRequest decodes an ack request body.
func DecodeAckRequest(body []byte) (AckRequest, error) {
	r := reader{b: body}
	a := AckRequest{
		Subject:    r.string8(),
		Group:      r.string8(),
		ConsumerID: r.string8(),
		Flags:      r.u8(),
		First:      r.u64(),
		Last:       r.u64(),
	}
	if err := r.done(); err != nil {
		return AckRequest{}, fmt.Errorf("%w: ack request", err)
	}
	return a, nil
}

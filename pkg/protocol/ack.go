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
//
// bit2 list: the request names pull seqs one by one instead of a range
// (per-message acks that were ready together, consumer.AckEach):
//
//	… | flags u8 (bit2 set) | count u16 | count × pull seq u64
//
// Each named seq is one message's ack, applied in the order listed as if
// each had come alone; count is 1 … MaxAckList. A broker that predates the
// list answers StatusBadRequest (trailing bytes).

// Ack request flags.
const (
	AckBroadcast uint8 = 1 << 0
	AckRelease   uint8 = 1 << 1
	AckList      uint8 = 1 << 2
)

// MaxAckList is the most pull seqs one list ack names.
const MaxAckList = 4096

// AckRequest acknowledges pull sequences [First, Last] of one consumer, or,
// with AckList, each pull seq of Seqs (First and Last unused).
type AckRequest struct {
	Subject    string
	Group      string
	ConsumerID string
	Flags      uint8
	First      uint64
	Last       uint64
	Seqs       []uint64
}

// AppendAckRequest appends the body of a.
func AppendAckRequest(dst []byte, a *AckRequest) []byte {
	dst = appendString8(dst, a.Subject)
	dst = appendString8(dst, a.Group)
	dst = appendString8(dst, a.ConsumerID)
	dst = append(dst, a.Flags)
	if a.Flags&AckList != 0 {
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(a.Seqs)))
		for _, s := range a.Seqs {
			dst = binary.BigEndian.AppendUint64(dst, s)
		}
		return dst
	}
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
	}
	if a.Flags&AckList != 0 {
		n := int(r.u16())
		if r.err == nil && (n == 0 || n > MaxAckList) {
			return AckRequest{}, fmt.Errorf("%w: ack request: list of %d pull seqs", ErrBadRequest, n)
		}
		if r.need(n * 8) {
			a.Seqs = make([]uint64, n)
			for i := range a.Seqs {
				a.Seqs[i] = r.u64()
			}
		}
	} else {
		a.First, a.Last = r.u64(), r.u64()
	}
	if err := r.done(); err != nil {
		return AckRequest{}, fmt.Errorf("%w: ack request", err)
	}
	return a, nil
}

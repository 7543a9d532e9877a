package protocol

import (
	"encoding/binary"
	"fmt"
	"time"
)

// PullRequest body (CmdPull):
//
//	subject len u8 | subject | group len u8 | group | consumer len u8 | consumer
//	max u32 | timeout ms u32 | flags u8 | known pull seq i64
//	tag mode u8 | tag count u8 | tag count × (tag len u8 | tag)
//
// flags: bit0 broadcast, bit1 start at earliest (a new group only).
// known pull seq is the highest pull sequence the consumer still holds or
// has acked (-1 for none): the broker re-delivers its un-acked entries above
// it before handing out new ones. timeout is how long the broker may hold the
// request waiting for messages (0 answers at once).
//
// PullResponse body:
//
//	count u32 | count × (pull seq u64 | consume seq u64 | message len u32 | message)
//
// pull seq is the consumer's own sequence for the entry (what it acks);
// consume seq is the message's sequence in the subject's consume log.

// TagMode says how a pull's tags match a message's tags.
type TagMode uint8

const (
	// TagNone matches every message.
	TagNone TagMode = 0
	// TagAny matches messages with at least one of the tags (OR).
	TagAny TagMode = 1
	// TagAll matches messages with every one of the tags (AND).
	TagAll TagMode = 2
)

// Pull request flags.
const (
	PullBroadcast uint8 = 1 << 0
	PullEarliest  uint8 = 1 << 1
	// PullPipelined: the consumer has earlier pulls in flight whose answers
	// it has not seen, so entries above KnownPullSeq may be on their way to
	// it; the broker re-delivers nothing on this pull and hands out new
	// entries only (a pull without it re-delivers what the consumer lost).
	PullPipelined uint8 = 1 << 2

	pullFlags = PullBroadcast | PullEarliest | PullPipelined
)

// PullRequest asks for up to Max messages for one consumer.
type PullRequest struct {
	Subject      string
	Group        string
	ConsumerID   string
	Max          uint32
	Timeout      time.Duration
	Flags        uint8
	KnownPullSeq int64
	TagMode      TagMode
	Tags         []string
}

// AppendPullRequest appends the body of r.
func AppendPullRequest(dst []byte, r *PullRequest) []byte {
	dst = appendString8(dst, r.Subject)
	dst = appendString8(dst, r.Group)
	dst = appendString8(dst, r.ConsumerID)
	dst = binary.BigEndian.AppendUint32(dst, r.Max)
	dst = binary.BigEndian.AppendUint32(dst, uint32(r.Timeout/time.Millisecond))
	dst = append(dst, r.Flags)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.KnownPullSeq))
	dst = append(dst, uint8(r.TagMode), uint8(len(r.Tags)))
	for _, t := range r.Tags {
		dst = appendString8(dst, t)
	}
	return dst
}

// DecodePullRequest decodes a pull request body.
func DecodePullRequest(body []byte) (PullRequest, error) {
	r := reader{b: body}
	p := PullRequest{
		Subject:    r.string8(),
		Group:      r.string8(),
		ConsumerID: r.string8(),
		Max:        r.u32(),
		Timeout:    time.Duration(r.u32()) * time.Millisecond,
		Flags:      r.u8(),
	}
	p.KnownPullSeq = int64(r.u64())
	p.TagMode = TagMode(r.u8())
	n := int(r.u8())
	for i := 0; i < n && r.err == nil; i++ {
		p.Tags = append(p.Tags, r.string8())
	}
	if err := r.done(); err != nil {
		return PullRequest{}, fmt.Errorf("%w: pull request", err)
	}
	if p.TagMode > TagAll {
		return PullRequest{}, fmt.Errorf("%w: pull request tag mode %d", ErrBadRequest, p.TagMode)
	}
	if p.Flags&^pullFlags != 0 {
		return PullRequest{}, fmt.Errorf("%w: pull request flags 0x%02x", ErrBadRequest, p.Flags)
	}
	return p, nil
}

// PulledMessage is one entry of a pull response. Message aliases the body.
type PulledMessage struct {
	PullSeq    uint64
	ConsumeSeq uint64
	Message    []byte
}

// PullItemHeaderSize is the size of the per-message header in a pull
// response, so servers can write it beside the stored bytes (writev).
const PullItemHeaderSize = 20

// AppendPullItemHeader appends the per-message header of a pull response.
func AppendPullItemHeader(dst []byte, pullSeq, consumeSeq uint64, msgLen int) []byte {
	dst = binary.BigEndian.AppendUint64(dst, pullSeq)
	dst = binary.BigEndian.AppendUint64(dst, consumeSeq)
	return binary.BigEndian.AppendUint32(dst, uint32(msgLen))
}

// AppendPullResponse appends a whole pull response body.
func AppendPullResponse(dst []byte, msgs []PulledMessage) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(msgs)))
	for _, m := range msgs {
		dst = AppendPullItemHeader(dst, m.PullSeq, m.ConsumeSeq, len(m.Message))
		dst = append(dst, m.Message...)
	}
	return dst
}

// DecodePullResponse splits a pull response body. The messages are not
// parsed; clients parse each with ParseMessage, which checks its CRC.
func DecodePullResponse(body []byte) ([]PulledMessage, error) {
	r := reader{b: body}
	n := r.u32()
	if r.err == nil && uint64(n)*PullItemHeaderSize > uint64(len(body)) {
		return nil, fmt.Errorf("%w: pull response claims %d messages in %d bytes", ErrTruncated, n, len(body))
	}
	out := make([]PulledMessage, 0, n)
	for i := uint32(0); i < n && r.err == nil; i++ {
		m := PulledMessage{PullSeq: r.u64(), ConsumeSeq: r.u64()}
		m.Message = r.bytes32()
		out = append(out, m)
	}
	if err := r.done(); err != nil {
		return nil, fmt.Errorf("%w: pull response", err)
	}
	return out, nil
}

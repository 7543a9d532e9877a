package protocol

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// SendRequest body (CmdSend):
//
//	+--------+-------+---------------------------------------+
//	| epoch  | count | count × (message len u32 | message)    |
//	|  u64   |  u32  |                                       |
//	+--------+-------+---------------------------------------+
//
// epoch is the group epoch the sender believes current; 0 skips the check.
// Each message is an encoded Message (see message.go), stored as sent.
//
// SendResponse body: count u32 | count × status u16, one per message in
// request order. A request-level failure is a non-OK frame status instead.

// SendRequest is a decoded send request. Messages alias the request body.
type SendRequest struct {
	Epoch    uint64
	Messages [][]byte
}

// AppendSendRequest appends the body of a send request carrying msgs, each
// an encoded message.
func AppendSendRequest(dst []byte, epoch uint64, msgs [][]byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, epoch)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(msgs)))
	for _, m := range msgs {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(m)))
		dst = append(dst, m...)
	}
	return dst
}

// SendBatch builds a send request body one message at a time, encoding each
// message straight into the body.
type SendBatch struct {
	buf   []byte
	count int
}

// Reset empties the batch for reuse and sets its epoch.
func (b *SendBatch) Reset(epoch uint64) {
	b.buf = binary.BigEndian.AppendUint64(b.buf[:0], epoch)
	b.buf = append(b.buf, 0, 0, 0, 0)
	b.count = 0
}

// Add encodes m into the batch.
func (b *SendBatch) Add(m *Message, limits Limits) error {
	if len(b.buf) < 12 {
		b.Reset(0)
	}
	at := len(b.buf)
	b.buf = append(b.buf, 0, 0, 0, 0)
	out, err := AppendMessage(b.buf, m, limits)
	if err != nil {
		b.buf = b.buf[:at]
		return err
	}
	binary.BigEndian.PutUint32(out[at:], uint32(len(out)-at-4))
	b.buf = out
	b.count++
	return nil
}

// AddEncoded appends an already encoded message.
func (b *SendBatch) AddEncoded(msg []byte) {
	if len(b.buf) < 12 {
		b.Reset(0)
	}
	b.buf = binary.BigEndian.AppendUint32(b.buf, uint32(len(msg)))
	b.buf = append(b.buf, msg...)
	b.count++
}

// Len returns the number of messages in the batch.
func (b *SendBatch) Len() int { return b.count }

// Size returns the body size so far.
func (b *SendBatch) Size() int { return len(b.buf) }

// Bytes returns the request body. It aliases the batch's buffer.
func (b *SendBatch) Bytes() []byte {
	if len(b.buf) < 12 {
		b.Reset(0)
	}
	binary.BigEndian.PutUint32(b.buf[8:12], uint32(b.count))
	return b.buf
}

// DecodeSendRequest splits a send request body. Messages alias body; they
// are not parsed (servers parse each with ParseMessage).
func DecodeSendRequest(body []byte) (SendRequest, error) {
	var req SendRequest
	err := req.Decode(body)
	return req, err
}

// Decode is DecodeSendRequest into r, reusing the capacity of r.Messages
// (a server decoding one request after another allocates nothing). On an
// error r is zero but keeps that capacity.
func (r *SendRequest) Decode(body []byte) error {
	sr, err := NewSendReader(body)
	msgs := r.Messages[:0]
	if err == nil {
		msgs = slices.Grow(msgs, sr.Count)
		for range sr.Count {
			var m []byte
			if m, err = sr.Next(); err != nil {
				break
			}
			msgs = append(msgs, m)
		}
		if err == nil {
			err = sr.End()
		}
	}
	if err != nil {
		clear(msgs)
		r.Epoch, r.Messages = 0, msgs[:0]
		return err
	}
	r.Epoch, r.Messages = sr.Epoch, msgs
	return nil
}

// SendReader splits a send request body one message at a time, for a
// server that checks each message as it reaches it: splitting them all
// first reads every length before any message (each length says where the
// next one starts), a cache miss a message waited out one after another
// on a body just read from the socket, where checking each in turn
// streams through the bytes. The messages alias the body.
type SendReader struct {
	Epoch uint64
	Count int // the messages the request says it carries
	rd    reader
	read  int
}

// NewSendReader reads a send request's epoch and count.
func NewSendReader(body []byte) (SendReader, error) {
	sr := SendReader{rd: reader{b: body}}
	sr.Epoch = sr.rd.u64()
	n := sr.rd.u32()
	if sr.rd.err != nil {
		return SendReader{}, fmt.Errorf("%w: send request", sr.rd.err)
	}
	if uint64(n)*4 > uint64(len(body)) {
		return SendReader{}, fmt.Errorf("%w: send request claims %d messages in %d bytes", ErrTruncated, n, len(body))
	}
	sr.Count = int(n)
	return sr, nil
}

// Next returns the next message (Count of them in all).
func (sr *SendReader) Next() ([]byte, error) {
	if sr.read == sr.Count {
		return nil, fmt.Errorf("%w: send request: more than its %d messages read", ErrTruncated, sr.Count)
	}
	m := sr.rd.bytes32()
	if sr.rd.err != nil {
		return nil, fmt.Errorf("%w: send request", sr.rd.err)
	}
	sr.read++
	return m, nil
}

// End reports an error when bytes follow the last message (or messages
// were left unread).
func (sr *SendReader) End() error {
	if sr.read != sr.Count {
		return fmt.Errorf("%w: send request: %d of %d messages read", ErrTruncated, sr.read, sr.Count)
	}
	if err := sr.rd.done(); err != nil {
		return fmt.Errorf("%w: send request", err)
	}
	return nil
}

// Move points r.Messages into body, a copy of the body r was decoded
// from, by the messages' lengths alone (no decoding, no checks): a server
// that keeps a request past its read buffer re-points what it decoded.
func (r *SendRequest) Move(body []byte) {
	at := 12 // epoch, count
	for i, m := range r.Messages {
		at += 4
		r.Messages[i] = body[at : at+len(m) : at+len(m)]
		at += len(m)
	}
}

// AppendSendResponse appends a send response body.
func AppendSendResponse(dst []byte, statuses []Status) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(statuses)))
	for _, s := range statuses {
		dst = binary.BigEndian.AppendUint16(dst, uint16(s))
	}
	return dst
}

// DecodeSendResponse decodes a send response body.
func DecodeSendResponse(body []byte) ([]Status, error) {
	return DecodeSendResponseInto(nil, body)
}

// DecodeSendResponseInto is DecodeSendResponse appending the statuses to
// dst[:0], so a caller sending one message at a time can decode into an
// array of its own without allocating.
func DecodeSendResponseInto(dst []Status, body []byte) ([]Status, error) {
	r := reader{b: body}
	n := r.u32()
	if r.err == nil && uint64(n)*2 != uint64(len(body)-4) {
		return nil, fmt.Errorf("%w: send response claims %d statuses in %d bytes", ErrTruncated, n, len(body))
	}
	out := dst[:0]
	if cap(out) < int(n) {
		out = make([]Status, 0, n)
	}
	for i := uint32(0); i < n && r.err == nil; i++ {
		out = append(out, Status(r.u16()))
	}
	if err := r.done(); err != nil {
		return nil, fmt.Errorf("%w: send response", err)
	}
	return out, nil
}

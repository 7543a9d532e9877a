package protocol

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"
)

// Message encoding (big-endian). The producer encodes a message once; brokers
// store and serve exactly these bytes, and every reader checks the CRC.
//
//	0        4     5       6          8                16                24
//	+--------+-----+-------+----------+----------------+-----------------+
//	| crc32c | ver | flags | attempts |  created (ms)  | deliver at (ms) |
//	|  u32   | u8  |  u8   |   u16    |      i64       |       i64       |
//	+--------+-----+-------+----------+----------------+-----------------+
//	24: subject len u8 | subject | id len u8 | id
//	    tag count u8   | tag count × (tag len u8 | tag)
//	    prop count u16 | prop count × (key len u16 | key | value len u32 | value)
//	    body len u32   | body
//
// crc32c is CRC-32C (Castagnoli) over every byte after it. ver is
// MessageVersion. created and deliver at are Unix milliseconds; deliver at 0
// means now. Deliver at is rounded up to a whole millisecond (created is
// truncated): a message is never due before the DeliverAt it was given. attempts counts earlier deliveries that failed (0 on the first).
// flags must be 0 in version 1.
// Properties are written in the order given; keys are unique.
const (
	// MessageVersion is the message encoding version this package writes.
	MessageVersion uint8 = 1
	// messageFixedSize is the size of the fixed prefix up to the subject.
	messageFixedSize = 24
	// MinMessageSize is the smallest well-formed encoded message.
	MinMessageSize = messageFixedSize + 1 + 1 + 1 + 2 + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC-32C of b, the checksum used by messages and by
// the storage records built on this package.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// UpdateChecksum extends crc with b.
func UpdateChecksum(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }

// Property is one key/value pair of a message's properties.
type Property struct {
	Key, Value string
}

// Message is the decoded form of a message, as clients build and read it.
type Message struct {
	Subject    string
	ID         string
	Tags       []string
	Properties []Property
	Body       []byte
	// Created is when the producer made the message.
	Created time.Time
	// DeliverAt is the earliest time the message may reach a handler; the zero
	// time means now.
	DeliverAt time.Time
	// Attempts counts the earlier deliveries that failed.
	Attempts uint16
}

// Property returns the value of the property key and whether it is set.
func (m *Message) Property(key string) (string, bool) {
	for _, p := range m.Properties {
		if p.Key == key {
			return p.Value, true
		}
	}
	return "", false
}

// EncodedSize returns the size of m's encoding.
func (m *Message) EncodedSize() int {
	n := messageFixedSize + 1 + len(m.Subject) + 1 + len(m.ID) + 1 + 2 + 4 + len(m.Body)
	for _, t := range m.Tags {
		n += 1 + len(t)
	}
	for _, p := range m.Properties {
		n += 2 + len(p.Key) + 4 + len(p.Value)
	}
	return n
}

// AppendMessage appends the encoding of m to dst after checking it against
// limits. On error dst is returned unchanged.
func AppendMessage(dst []byte, m *Message, limits Limits) ([]byte, error) {
	if err := limits.CheckMessage(m); err != nil {
		return dst, err
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, MessageVersion, 0)
	dst = binary.BigEndian.AppendUint16(dst, m.Attempts)
	dst = binary.BigEndian.AppendUint64(dst, uint64(unixMillis(m.Created)))
	dst = binary.BigEndian.AppendUint64(dst, uint64(dueMillis(m.DeliverAt)))
	dst = append(dst, uint8(len(m.Subject)))
	dst = append(dst, m.Subject...)
	dst = append(dst, uint8(len(m.ID)))
	dst = append(dst, m.ID...)
	dst = append(dst, uint8(len(m.Tags)))
	for _, t := range m.Tags {
		dst = append(dst, uint8(len(t)))
		dst = append(dst, t...)
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(m.Properties)))
	for _, p := range m.Properties {
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(p.Key)))
		dst = append(dst, p.Key...)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(p.Value)))
		dst = append(dst, p.Value...)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(m.Body)))
	dst = append(dst, m.Body...)
	binary.BigEndian.PutUint32(dst[start:], Checksum(dst[start+4:]))
	return dst, nil
}

func unixMillis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// dueMillis is t in Unix milliseconds rounded up: a time between two
// milliseconds is due at the later one, never before t.
func dueMillis(t time.Time) int64 {
	ms := unixMillis(t)
	if ms != 0 && t.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}

func fromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// View is a parsed message that points into its encoded bytes: no field is
// copied. It is valid as long as Raw is.
type View struct {
	// Raw is the whole encoded message, CRC included.
	Raw []byte
	// Attempts, CreatedMillis and DeliverAtMillis are the fixed fields.
	Attempts        uint16
	CreatedMillis   int64
	DeliverAtMillis int64
	Subject         []byte
	ID              []byte
	// tags holds the tag section after its count byte; tagCount tags.
	tags     []byte
	tagCount int
	// props holds the property section after its count; propCount pairs.
	props     []byte
	propCount int
	Body      []byte
}

// ParseMessage checks b's CRC and structure and returns a View of it. b must
// hold exactly one message.
func ParseMessage(b []byte) (View, error) {
	v, err := parseMessage(b)
	if err != nil {
		return View{}, err
	}
	if got, want := Checksum(b[4:]), binary.BigEndian.Uint32(b); got != want {
		return View{}, fmt.Errorf("%w: message %q", ErrChecksum, v.ID)
	}
	return v, nil
}

// ParseMessageNoCRC parses b like ParseMessage without checking the CRC, for
// callers that have just verified a checksum covering b.
func ParseMessageNoCRC(b []byte) (View, error) { return parseMessage(b) }

func parseMessage(b []byte) (View, error) {
	if len(b) < MinMessageSize {
		return View{}, fmt.Errorf("%w: message of %d bytes", ErrTruncated, len(b))
	}
	if b[4] != MessageVersion {
		return View{}, fmt.Errorf("%w: %d", ErrMessageVersion, b[4])
	}
	if b[5] != 0 {
		// Version 1 defines no message flags; a reader that ignored them
		// could not store and serve the bytes faithfully.
		return View{}, fmt.Errorf("%w: flags 0x%02x", ErrMessageVersion, b[5])
	}
	v := View{
		Raw:             b,
		Attempts:        binary.BigEndian.Uint16(b[6:8]),
		CreatedMillis:   int64(binary.BigEndian.Uint64(b[8:16])),
		DeliverAtMillis: int64(binary.BigEndian.Uint64(b[16:24])),
	}
	r := reader{b: b, off: messageFixedSize}
	v.Subject = r.bytes8()
	v.ID = r.bytes8()
	v.tagCount = int(r.u8())
	tagStart := r.off
	for i := 0; i < v.tagCount; i++ {
		r.bytes8()
	}
	if r.err == nil {
		v.tags = b[tagStart:r.off]
	}
	v.propCount = int(r.u16())
	propStart := r.off
	for i := 0; i < v.propCount; i++ {
		r.bytes16()
		r.bytes32()
	}
	if r.err == nil {
		v.props = b[propStart:r.off]
	}
	v.Body = r.bytes32()
	if r.err != nil {
		return View{}, fmt.Errorf("%w: message", r.err)
	}
	if r.off != len(b) {
		return View{}, fmt.Errorf("%w: %d after message", ErrTrailingBytes, len(b)-r.off)
	}
	return v, nil
}

// Move points v into raw, a copy of v.Raw (the same bytes at another
// address), without parsing again: every field is re-sliced at the offset
// the layout gives it. A server that parsed a message in a buffer it must
// give back keeps the view of its copy this way. raw must hold exactly
// v.Raw's bytes (only its length is checked: it panics on another length).
func (v *View) Move(raw []byte) {
	if len(raw) != len(v.Raw) {
		panic("protocol: View.Move to bytes of another length")
	}
	at := messageFixedSize + 1
	v.Raw = raw
	v.Subject = raw[at : at+len(v.Subject) : at+len(v.Subject)]
	at += len(v.Subject) + 1
	v.ID = raw[at : at+len(v.ID) : at+len(v.ID)]
	at += len(v.ID) + 1
	v.tags = raw[at : at+len(v.tags) : at+len(v.tags)]
	at += len(v.tags) + 2
	v.props = raw[at : at+len(v.props) : at+len(v.props)]
	at += len(v.props) + 4
	v.Body = raw[at : at+len(v.Body) : at+len(v.Body)]
}

// TagCount returns the number of tags.
func (v *View) TagCount() int { return v.tagCount }

// Tags calls fn for each tag in order until fn returns false.
func (v *View) Tags(fn func(tag []byte) bool) {
	r := reader{b: v.tags}
	for i := 0; i < v.tagCount; i++ {
		if !fn(r.bytes8()) {
			return
		}
	}
}

// HasTag reports whether the message carries tag.
func (v *View) HasTag(tag []byte) bool {
	found := false
	v.Tags(func(t []byte) bool {
		found = string(t) == string(tag)
		return !found
	})
	return found
}

// PropertyCount returns the number of properties.
func (v *View) PropertyCount() int { return v.propCount }

// Properties calls fn for each property in order until fn returns false.
func (v *View) Properties(fn func(key, value []byte) bool) {
	r := reader{b: v.props}
	for i := 0; i < v.propCount; i++ {
		k := r.bytes16()
		val := r.bytes32()
		if !fn(k, val) {
			return
		}
	}
}

// Message copies the view into a Message.
func (v *View) Message() *Message {
	m := &Message{
		Subject:   string(v.Subject),
		ID:        string(v.ID),
		Body:      append([]byte(nil), v.Body...),
		Created:   fromMillis(v.CreatedMillis),
		DeliverAt: fromMillis(v.DeliverAtMillis),
		Attempts:  v.Attempts,
	}
	if v.tagCount > 0 {
		m.Tags = make([]string, 0, v.tagCount)
		v.Tags(func(t []byte) bool { m.Tags = append(m.Tags, string(t)); return true })
	}
	if v.propCount > 0 {
		m.Properties = make([]Property, 0, v.propCount)
		v.Properties(func(k, val []byte) bool {
			m.Properties = append(m.Properties, Property{Key: string(k), Value: string(val)})
			return true
		})
	}
	return m
}

// DecodeMessage parses and copies b into a Message.
func DecodeMessage(b []byte) (*Message, error) {
	v, err := ParseMessage(b)
	if err != nil {
		return nil, err
	}
	return v.Message(), nil
}

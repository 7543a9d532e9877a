package gateway

import (
	"bytes"
	"encoding/binary"
	"unicode/utf8"
	"unsafe"
)

// A strict decoder for the common shape of the two bodies every publish
// and every ack carries (PublishRequest, AckRequest): objects with the
// fields spelled exactly, strings without escapes, no nulls, no repeated
// fields. Strings alias the request body (read once into a buffer of its
// own, never written again), so a message body is not copied before the
// producer encodes it. Anything else — an escape, a field spelled in
// another case, deliverAt, null, a malformed document — makes it give up,
// and decodeJSON decodes the same bytes with goccy/go-json: this decoder
// accepts a subset of what that one accepts and yields the same values
// (TestFastDecode_MatchesGoJSON, FuzzFastDecode).

// jsonScanner reads a JSON document in b from i.
type jsonScanner struct {
	b []byte
	i int
}

func (s *jsonScanner) skipSpace() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// tok skips white space and consumes c if it comes next.
func (s *jsonScanner) tok(c byte) bool {
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (s *jsonScanner) end() bool {
	s.skipSpace()
	return s.i == len(s.b)
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainWord is zero when none of the 8 bytes of w needs a closer look in
// a JSON string: a quote, a backslash, a control character or a byte of a
// multi-byte UTF-8 sequence (the usual "has a zero byte" bit trick; its
// false positives only send a word to the byte-wise path).
func plainWord(w uint64) uint64 {
	hasZero := func(x uint64) uint64 { return (x - ones) & ^x & highs }
	return hasZero(w^(ones*'"')) | hasZero(w^(ones*'\\')) | ((w - ones*0x20) & ^w & highs) | (w & highs)
}

// str reads a string that needs no unescaping and is valid UTF-8 (what
// the standard decoder would return unchanged), aliasing b. Without a
// backslash the first quote ends the string: it is found with a vector
// scan, and the bytes before it are checked for a backslash (another) and
// for control or non-ASCII bytes (8 at a time, one branch at the end),
// which send it to a byte-wise check.
func (s *jsonScanner) str() (string, bool) {
	if !s.tok('"') {
		return "", false
	}
	b, start := s.b, s.i
	q := bytes.IndexByte(b[start:], '"')
	if q < 0 {
		return "", false
	}
	seg := b[start : start+q]
	if bytes.IndexByte(seg, '\\') >= 0 {
		return "", false
	}
	var acc uint64
	i := 0
	for ; i+8 <= len(seg); i += 8 {
		w := binary.LittleEndian.Uint64(seg[i:])
		acc |= (w-ones*0x20)&^w | w // a byte below 0x20, or with its high bit set
	}
	for ; i < len(seg); i++ {
		if seg[i] < 0x20 || seg[i] >= utf8.RuneSelf {
			acc |= highs
		}
	}
	if acc&highs != 0 && !plainText(seg) {
		return "", false
	}
	s.i = start + q + 1
	if q == 0 {
		return "", true
	}
	return unsafe.String(&seg[0], q), true
}

// plainText reports whether seg holds no control character and is valid
// UTF-8.
func plainText(seg []byte) bool {
	for _, c := range seg {
		if c < 0x20 {
			return false
		}
	}
	return utf8.Valid(seg)
}

// strings reads an array of strings ([] is an empty, non-nil slice, as
// encoding/json decodes it).
func (s *jsonScanner) strings(hint int) ([]string, bool) {
	if !s.tok('[') {
		return nil, false
	}
	out := make([]string, 0, hint)
	if s.tok(']') {
		return out, true
	}
	for {
		v, ok := s.str()
		if !ok {
			return nil, false
		}
		out = append(out, v)
		if s.tok(']') {
			return out, true
		}
		if !s.tok(',') {
			return nil, false
		}
	}
}

// fields reads an object's members, calling field after each key (the
// scanner then at the value); field reports whether it read the value.
func (s *jsonScanner) fields(field func(key string) bool) bool {
	if !s.tok('{') {
		return false
	}
	if s.tok('}') {
		return true
	}
	for {
		k, ok := s.str()
		if !ok || !s.tok(':') || !field(k) {
			return false
		}
		if s.tok('}') {
			return true
		}
		if !s.tok(',') {
			return false
		}
	}
}

// decodeFast decodes b into req when it has the common shape, reusing
// req.Messages' capacity.
func (req *PublishRequest) decodeFast(b []byte) bool {
	s := jsonScanner{b: b}
	var msgs []PublishMessage
	seen := false
	ok := s.fields(func(k string) bool {
		if k != "messages" || seen {
			return false
		}
		seen = true
		if !s.tok('[') {
			return false
		}
		// Every message is an object of at least {"subject":"a","body":""}:
		// counting braces (one byte, a vector scan) and that size bound
		// their number; a search for "subject" cost a tenth of a publish.
		n := min(bytes.Count(b, []byte{'{'}), len(b)/25, 1024)
		if msgs = req.Messages[:0]; msgs == nil || cap(msgs) < n {
			msgs = make([]PublishMessage, 0, n)
		}
		if s.tok(']') {
			return true
		}
		for {
			msgs = append(msgs, PublishMessage{})
			if !msgs[len(msgs)-1].decodeFast(&s) {
				return false
			}
			if s.tok(']') {
				return true
			}
			if !s.tok(',') {
				return false
			}
		}
	})
	if !ok || !s.end() {
		return false
	}
	req.Messages = msgs
	return true
}

func (m *PublishMessage) decodeFast(s *jsonScanner) bool {
	var seen uint8
	return s.fields(func(k string) bool {
		var bit uint8
		var dst *string
		switch k {
		case "subject":
			bit, dst = 1, &m.Subject
		case "id":
			bit, dst = 2, &m.ID
		case "body":
			bit, dst = 4, &m.Body
		case "bodyEncoding":
			bit, dst = 8, &m.BodyEncoding
		case "delay":
			bit, dst = 16, &m.Delay
		case "tags":
			bit = 32
		case "properties":
			bit = 64
		default: // deliverAt, another spelling, an unknown field
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		var ok bool
		switch {
		case dst != nil:
			*dst, ok = s.str()
		case bit == 32:
			m.Tags, ok = s.strings(4)
		default:
			props := map[string]string{}
			ok = s.fields(func(k string) bool {
				v, ok := s.str()
				props[k] = v
				return ok
			})
			m.Properties = props
		}
		return ok
	})
}

// decodeFast decodes b into req when it has the common shape.
func (req *AckRequest) decodeFast(b []byte) bool {
	s := jsonScanner{b: b}
	var r AckRequest
	var seen uint8
	ok := s.fields(func(k string) bool {
		var bit uint8
		var ok bool
		switch k {
		case "consumer":
			bit = 1
			r.Consumer, ok = s.str()
		case "ids":
			bit = 2
			r.IDs, ok = s.strings(min(bytes.Count(b, []byte{','})+1, 1024))
		case "retryAfter":
			bit = 4
			r.RetryAfter, ok = s.str()
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return ok
	})
	if !ok || !s.end() {
		return false
	}
	*req = r
	return true
}

package protocol

import (
	"fmt"
	"strings"
	"time"
)

// DefaultDelayHorizon is how far ahead a delayed message may be due unless
// the delay group is configured otherwise (qmq-delay --horizon): two years,
// a leap day included. Further ahead is StatusBeyondHorizon.
const DefaultDelayHorizon = 731 * 24 * time.Hour

// Limits bound what a message may hold. The zero value is not useful; start
// from DefaultLimits.
type Limits struct {
	// MaxBody is the largest body in bytes (default 4 MiB).
	MaxBody int
	// MaxSubject is the longest subject in bytes (default 200, at most 255).
	MaxSubject int
	// MaxID is the longest message id in bytes (default 128, at most 255).
	MaxID int
	// MaxTags is the most tags one message may carry (default 10).
	MaxTags int
	// MaxTag is the longest tag in bytes (default 64, at most 255).
	MaxTag int
	// MaxProperties is the most properties one message may carry (default 256).
	MaxProperties int
	// MaxPropertyBytes bounds the sum of all property keys and values
	// (default 1 MiB).
	MaxPropertyBytes int
}

// DefaultLimits are the limits every server and client uses unless
// configured otherwise.
var DefaultLimits = Limits{
	MaxBody:          4 << 20,
	MaxSubject:       200,
	MaxID:            128,
	MaxTags:          10,
	MaxTag:           64,
	MaxProperties:    256,
	MaxPropertyBytes: 1 << 20,
}

// MaxEncodedSize returns the largest encoded message the limits allow.
func (l Limits) MaxEncodedSize() int {
	return messageFixedSize + 1 + l.MaxSubject + 1 + l.MaxID + 1 + l.MaxTags*(1+l.MaxTag) +
		2 + l.MaxProperties*6 + l.MaxPropertyBytes + 4 + l.MaxBody
}

// Validate checks that the limits are usable.
func (l Limits) Validate() error {
	switch {
	case l.MaxBody <= 0:
		return fmt.Errorf("limits: MaxBody must be positive, got %d", l.MaxBody)
	case l.MaxSubject <= 0 || l.MaxSubject > 255:
		return fmt.Errorf("limits: MaxSubject must be in 1..255, got %d", l.MaxSubject)
	case l.MaxID <= 0 || l.MaxID > 255:
		return fmt.Errorf("limits: MaxID must be in 1..255, got %d", l.MaxID)
	case l.MaxTags < 0 || l.MaxTags > 255:
		return fmt.Errorf("limits: MaxTags must be in 0..255, got %d", l.MaxTags)
	case l.MaxTag <= 0 || l.MaxTag > 255:
		return fmt.Errorf("limits: MaxTag must be in 1..255, got %d", l.MaxTag)
	case l.MaxProperties < 0 || l.MaxProperties > 65535:
		return fmt.Errorf("limits: MaxProperties must be in 0..65535, got %d", l.MaxProperties)
	case l.MaxPropertyBytes < 0:
		return fmt.Errorf("limits: MaxPropertyBytes must not be negative, got %d", l.MaxPropertyBytes)
	}
	return nil
}

// CheckMessage returns an *Error (StatusInvalid or StatusTooLarge) naming the
// first rule m breaks. System subjects (starting with %) are allowed.
func (l Limits) CheckMessage(m *Message) error {
	if err := l.checkSubject(m.Subject, true); err != nil {
		return err
	}
	if m.ID == "" || len(m.ID) > l.MaxID {
		return Errorf(StatusInvalid, fmt.Sprintf("message id must be 1..%d bytes, got %d", l.MaxID, len(m.ID)))
	}
	if len(m.Tags) > l.MaxTags {
		return Errorf(StatusInvalid, fmt.Sprintf("at most %d tags, got %d", l.MaxTags, len(m.Tags)))
	}
	for _, t := range m.Tags {
		if t == "" || len(t) > l.MaxTag {
			return Errorf(StatusInvalid, fmt.Sprintf("tag must be 1..%d bytes, got %d", l.MaxTag, len(t)))
		}
	}
	if len(m.Properties) > l.MaxProperties {
		return Errorf(StatusInvalid, fmt.Sprintf("at most %d properties, got %d", l.MaxProperties, len(m.Properties)))
	}
	total := 0
	for _, p := range m.Properties {
		if p.Key == "" || len(p.Key) > 65535 {
			return Errorf(StatusInvalid, fmt.Sprintf("property key must be 1..65535 bytes, got %d", len(p.Key)))
		}
		total += len(p.Key) + len(p.Value)
	}
	if total > l.MaxPropertyBytes {
		return Errorf(StatusTooLarge, fmt.Sprintf("properties hold %d bytes, limit %d", total, l.MaxPropertyBytes))
	}
	if len(m.Body) > l.MaxBody {
		return Errorf(StatusTooLarge, fmt.Sprintf("body is %d bytes, limit %d", len(m.Body), l.MaxBody))
	}
	return nil
}

// CheckView applies CheckMessage's rules to a parsed message, without
// copying it. Servers call it on every message they receive.
func (l Limits) CheckView(v *View) error {
	// The usual subject, a plain name, is checked on its bytes: converting
	// it to a string for checkSubject, whose errors quote it, would cost an
	// allocation per message.
	if !l.plainSubject(v.Subject) {
		if err := l.checkSubject(string(v.Subject), true); err != nil {
			return err
		}
	}
	if len(v.ID) == 0 || len(v.ID) > l.MaxID {
		return Errorf(StatusInvalid, fmt.Sprintf("message id must be 1..%d bytes, got %d", l.MaxID, len(v.ID)))
	}
	if v.tagCount > l.MaxTags {
		return Errorf(StatusInvalid, fmt.Sprintf("at most %d tags, got %d", l.MaxTags, v.tagCount))
	}
	var err error
	v.Tags(func(t []byte) bool {
		if len(t) == 0 || len(t) > l.MaxTag {
			err = Errorf(StatusInvalid, fmt.Sprintf("tag must be 1..%d bytes, got %d", l.MaxTag, len(t)))
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	if v.propCount > l.MaxProperties {
		return Errorf(StatusInvalid, fmt.Sprintf("at most %d properties, got %d", l.MaxProperties, v.propCount))
	}
	if len(v.props) > l.MaxPropertyBytes+6*v.propCount {
		return Errorf(StatusTooLarge, fmt.Sprintf("properties hold %d bytes, limit %d", len(v.props)-6*v.propCount, l.MaxPropertyBytes))
	}
	if len(v.Body) > l.MaxBody {
		return Errorf(StatusTooLarge, fmt.Sprintf("body is %d bytes, limit %d", len(v.Body), l.MaxBody))
	}
	return nil
}

// CheckSubject validates a subject a user may name: 1..MaxSubject bytes of
// [A-Za-z0-9._-]. System subjects are rejected.
func (l Limits) CheckSubject(s string) error { return l.checkSubject(s, false) }

func (l Limits) checkSubject(s string, allowSystem bool) error {
	if allowSystem && strings.HasPrefix(s, "%") {
		if _, _, _, ok := ParseSystemSubject(s); ok && len(s) <= 255 {
			return nil
		}
		return Errorf(StatusInvalid, fmt.Sprintf("malformed system subject %q", s))
	}
	if len(s) == 0 || len(s) > l.MaxSubject {
		return Errorf(StatusInvalid, fmt.Sprintf("subject must be 1..%d bytes, got %d", l.MaxSubject, len(s)))
	}
	if !IsName(s) {
		return Errorf(StatusInvalid, fmt.Sprintf("subject %q may hold only A-Z a-z 0-9 . _ -", s))
	}
	return nil
}

// plainSubject reports whether b is a valid subject that is not a system
// subject: 1..MaxSubject bytes of [A-Za-z0-9._-].
func (l Limits) plainSubject(b []byte) bool {
	if len(b) == 0 || len(b) > l.MaxSubject {
		return false
	}
	for _, c := range b {
		if !isNameByte(c) {
			return false
		}
	}
	return true
}

// CheckGroup validates a consumer group name: the subject rules.
func (l Limits) CheckGroup(g string) error {
	if len(g) == 0 || len(g) > l.MaxSubject || !IsName(g) {
		return Errorf(StatusInvalid, fmt.Sprintf("consumer group %q must be 1..%d bytes of A-Z a-z 0-9 . _ -", g, l.MaxSubject))
	}
	return nil
}

// CheckConsumerID validates a consumer id: 1..255 bytes of [A-Za-z0-9._:@-].
func CheckConsumerID(id string) error {
	if len(id) == 0 || len(id) > 255 {
		return Errorf(StatusInvalid, fmt.Sprintf("consumer id must be 1..255 bytes, got %d", len(id)))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !isNameByte(c) && c != ':' && c != '@' {
			return Errorf(StatusInvalid, fmt.Sprintf("consumer id %q may hold only A-Z a-z 0-9 . _ - : @", id))
		}
	}
	return nil
}

// IsName reports whether s is non-empty and made only of [A-Za-z0-9._-].
func IsName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

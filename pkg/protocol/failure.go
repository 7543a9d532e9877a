package protocol

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// Failure properties: a consumer that publishes a message again after its
// handler failed (to the group's retry subject, or past its attempts to the
// dead-letter subject) records why on the copy, replacing what an earlier
// failure recorded:
//
//	qmq.error      the handler's error text, at most MaxFailureText bytes
//	               (cut on a rune boundary, "…" appended when cut)
//	qmq.failed.at  when that delivery failed: Unix milliseconds, decimal
//	qmq.dead.why   on dead letters only: why the message went there
//
// The attempt count is the message's own Attempts field.
const (
	PropError    = "qmq.error"
	PropFailedAt = "qmq.failed.at"
	PropDeadWhy  = "qmq.dead.why"

	// MaxFailureText bounds the error text a copy carries.
	MaxFailureText = 1024
)

// Failure is what a retried or dead message says about its last failure.
type Failure struct {
	Error    string    // the handler's error text
	FailedAt time.Time // zero when not recorded
	DeadWhy  string    // dead letters only
}

// RecordFailure sets m's failure properties to f, replacing earlier ones and
// keeping every other property in order.
func RecordFailure(m *Message, f Failure) {
	kept := m.Properties[:0:0]
	for _, p := range m.Properties {
		switch p.Key {
		case PropError, PropFailedAt, PropDeadWhy:
		default:
			kept = append(kept, p)
		}
	}
	kept = append(kept, Property{Key: PropError, Value: cutText(f.Error, MaxFailureText)})
	if !f.FailedAt.IsZero() {
		kept = append(kept, Property{Key: PropFailedAt, Value: strconv.FormatInt(f.FailedAt.UnixMilli(), 10)})
	}
	if f.DeadWhy != "" {
		kept = append(kept, Property{Key: PropDeadWhy, Value: cutText(f.DeadWhy, MaxFailureText)})
	}
	m.Properties = kept
}

// FailureOf reads the failure properties of a message's properties; ok is
// false when none is set.
func FailureOf(props []Property) (f Failure, ok bool) {
	for _, p := range props {
		switch p.Key {
		case PropError:
			f.Error, ok = p.Value, true
		case PropFailedAt:
			if ms, err := strconv.ParseInt(p.Value, 10, 64); err == nil {
				f.FailedAt, ok = time.UnixMilli(ms), true
			}
		case PropDeadWhy:
			f.DeadWhy, ok = p.Value, true
		}
	}
	return f, ok
}

// cutText returns s cut to at most n bytes on a rune boundary, with "…"
// (3 bytes, counted) when cut; invalid UTF-8 is replaced.
func cutText(s string, n int) string {
	if !utf8.ValidString(s) {
		s = string([]rune(s)) // replaces invalid bytes with U+FFFD
	}
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

package delay

import (
	"strconv"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// dueKind is what the forwarder does with a due message.
type dueKind int

const (
	dueForward  dueKind = iota // forward it as it is
	dueExpired                 // drop it: its expiry has passed
	dueTemplate                // a recurring schedule's template (recurring.go)
)

// classify parses a due message and reads its properties once: a message carrying an
// expiry (protocol.PropExpireAt) that has passed at now (Unix ms) is
// dropped, marked dispatched and counted in
// qmq_delay_messages_expired_total instead of being forwarded; a template
// sends an occurrence.
func classify(msg []byte, now int64) (dueKind, protocol.View) {
	v, err := protocol.ParseMessageNoCRC(msg) // the store checked it on the way in and on read-back
	if err != nil {
		return dueForward, protocol.View{}
	}
	kind := dueForward
	v.Properties(func(k, val []byte) bool {
		switch string(k) {
		case protocol.PropExpireAt:
			if at, err := strconv.ParseInt(string(val), 10, 64); err == nil && now > at {
				kind = dueExpired
				return false
			}
		case protocol.PropCronSpec:
			kind = dueTemplate
		}
		return true
	})
	return kind, v
}

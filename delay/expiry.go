package delay

import "github.com/qmq-go/qmq/pkg/protocol"

// expired reports whether a due message carries an expiry
// (protocol.PropExpireAt) that has passed at now (Unix ms): the forwarder
// drops it, marks it dispatched and counts it in
// qmq_delay_messages_expired_total, instead of forwarding it.
func expired(msg []byte, now int64) bool {
	v, err := protocol.ParseMessageNoCRC(msg) // the store checked it on the way in and on read-back
	if err != nil {
		return false
	}
	at, ok := protocol.ExpiryOf(&v)
	return ok && now > at
}

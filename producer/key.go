package producer

import "github.com/qmq-go/qmq/pkg/protocol"

// SetKey sets msg's business key (an order number, say: the property
// protocol.PropKey), replacing an earlier one. Realtime brokers index it:
// `qmqctl lookup --key KEY` and `qmqctl trace --key KEY` find the messages
// that carry it.
func SetKey(msg *Message, key string) {
	for i, p := range msg.Properties {
		if p.Key == protocol.PropKey {
			msg.Properties[i].Value = key
			return
		}
	}
	msg.Properties = append(msg.Properties, Property{Key: protocol.PropKey, Value: key})
}

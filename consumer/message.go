package consumer

import (
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// Property is one key/value pair of a message's properties (the type
// producer.Property is, so a caller needs no pkg/protocol import).
type Property = protocol.Property

// Message is a received message. Subject is the subject the producer sent
// to (also for messages that came back through the retry subject).
type Message struct {
	Subject    string
	ID         string
	Tags       []string
	Properties []Property
	Body       []byte
	Created    time.Time
	// DeliverAt is when the message was due (zero: at once).
	DeliverAt time.Time
	// Attempts counts the earlier deliveries of this message that failed.
	Attempts int

	// Group is the consumer group this delivery belongs to.
	Group string
	// BrokerGroup names the broker group that served the message.
	BrokerGroup string

	delivery *delivery
}

// Property returns the value of property key and whether it is set.
func (m *Message) Property(key string) (string, bool) {
	for _, p := range m.Properties {
		if p.Key == key {
			return p.Value, true
		}
	}
	return "", false
}

// Ack marks a message from Puller.Pull as handled. Messages from a
// Subscribe handler are acked by the handler's return value instead.
func (m *Message) Ack() { m.finish(nil) }

// Nack marks a message from Puller.Pull as failed: it is retried like a
// handler's error (err may be a RetryAfter error, or nil for the default
// back-off).
func (m *Message) Nack(err error) {
	if err == nil {
		err = errNacked
	}
	m.finish(err)
}

func (m *Message) finish(err error) {
	if m.delivery != nil {
		m.delivery.finish(err)
	}
}

func millisTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

package api

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// StoredMessage is one stored copy of a message a lookup found: the
// original (Kind "message"), a retry copy ("retry": on the group's
// %RETRY% subject) or a dead letter ("dead").
type StoredMessage struct {
	BrokerGroup   string            `json:"brokerGroup"`
	Offset        int64             `json:"offset"` // message-log offset on that broker
	Seq           int64             `json:"seq"`    // consume-log sequence in StoredSubject
	StoredAt      time.Time         `json:"storedAt"`
	Kind          string            `json:"kind"`            // message, retry, dead, scheduled (a delay server's)
	Group         string            `json:"group,omitempty"` // the consumer group of a retry or dead copy
	ID            string            `json:"id"`
	Subject       string            `json:"subject"` // the user subject
	StoredSubject string            `json:"storedSubject"`
	Tags          []string          `json:"tags,omitempty"`
	Properties    map[string]string `json:"properties,omitempty"`
	Attempts      uint16            `json:"attempts"`
	CreatedAt     time.Time         `json:"createdAt"`
	DeliverAt     *time.Time        `json:"deliverAt,omitempty"`
	LastError     string            `json:"lastError,omitempty"`
	FailedAt      *time.Time        `json:"failedAt,omitempty"`
	DeadWhy       string            `json:"deadWhy,omitempty"`
	Size          int               `json:"size"`
	Body          string            `json:"body"`                 // UTF-8 text, or base64 when BodyBase64
	BodyBase64    bool              `json:"bodyBase64,omitempty"` // Body is base64
	BodyHidden    bool              `json:"bodyHidden,omitempty"` // the caller may not read bodies
	// Deliveries: where this copy stands in each consumer group of the
	// subject it is stored under (none for dead letters).
	Deliveries []Delivery `json:"deliveries,omitempty"`
	// ScheduleState, for a scheduled copy (on a delay server; Seq is its
	// hour file, Unix hours, Offset its record's offset there): pending,
	// cancelled (cancelled or rescheduled: another copy holds the new
	// time) or fired (forwarded, or being forwarded).
	ScheduleState string `json:"scheduleState,omitempty"`
}

// Delivery is where a stored copy stands in one consumer group: waiting
// (not taken yet), unacked (Consumer holds it) or acked (taken, and no
// consumer holds it: acked, or skipped by the group's tag filter).
type Delivery struct {
	Group    string     `json:"group"`
	State    string     `json:"state"`
	Consumer string     `json:"consumer,omitempty"`
	PullSeq  int64      `json:"pullSeq,omitempty"`
	LastSeen *time.Time `json:"lastSeen,omitempty"`
}

// Lookup is what GET /messages answers: every stored copy of the messages
// with an id, or with a key (property qmq.key), oldest first per broker
// group, and the broker groups that did not answer.
type Lookup struct {
	ID       string          `json:"id,omitempty"`
	Key      string          `json:"key,omitempty"`
	Messages []StoredMessage `json:"messages"`
	Errors   []BrokerFailure `json:"errors,omitempty"`
}

// TraceEvent is one step of a message's life, as the broker's records show
// it: sent, stored, then per consumer group waiting (not pulled yet),
// pulled (by a consumer that has not acked it) or acked, retried
// (attempt, error text, next due), dead (why), re-driven. When a group
// acked a copy is not recorded: an acked event carries the copy's time.
type TraceEvent struct {
	At          time.Time  `json:"at"`
	Event       string     `json:"event"` // sent, stored, pulled, acked, waiting, retried, dead, redriven
	Consumer    string     `json:"consumer,omitempty"`
	Group       string     `json:"group,omitempty"`
	BrokerGroup string     `json:"brokerGroup,omitempty"`
	Attempt     int        `json:"attempt,omitempty"`
	Error       string     `json:"error,omitempty"`
	NextDue     *time.Time `json:"nextDue,omitempty"`
	Detail      string     `json:"detail,omitempty"`
}

// Trace is one message's life, oldest first (GET /trace?id=ID answers
// one, GET /trace?key=KEY one per message id with the key).
type Trace struct {
	ID      string          `json:"id"`
	Subject string          `json:"subject"`
	Events  []TraceEvent    `json:"events"`
	Errors  []BrokerFailure `json:"errors,omitempty"`
}

// LookupOption changes where a lookup or trace looks.
type LookupOption func(url.Values)

// InSubject narrows where delay servers look. Without it a lookup by id
// asks every delay server (their id index spans subjects) and a lookup by
// key asks none (a schedule key is unique only within its subject); with it
// both ask the delay servers of subject's delay route. Delay servers find
// scheduled messages: pending, cancelled or fired.
func InSubject(subject string) LookupOption {
	return func(v url.Values) { v.Set("subject", subject) }
}

func lookupQuery(name, value string, opts []LookupOption) string {
	v := url.Values{name: {value}}
	for _, o := range opts {
		o(v)
	}
	return v.Encode()
}

// LookupID returns every stored copy of the message with id.
func (c *Client) LookupID(ctx context.Context, id string, opts ...LookupOption) (Lookup, error) {
	var l Lookup
	return l, c.Do(ctx, http.MethodGet, "/messages?"+lookupQuery("id", id, opts), nil, &l)
}

// LookupKey returns the stored messages with key (property qmq.key).
func (c *Client) LookupKey(ctx context.Context, key string, opts ...LookupOption) (Lookup, error) {
	var l Lookup
	return l, c.Do(ctx, http.MethodGet, "/messages?"+lookupQuery("key", key, opts), nil, &l)
}

// TraceID returns the life of the message with id.
func (c *Client) TraceID(ctx context.Context, id string, opts ...LookupOption) (Trace, error) {
	var t Trace
	return t, c.Do(ctx, http.MethodGet, "/trace?"+lookupQuery("id", id, opts), nil, &t)
}

// TraceKey returns the lives of the messages with key.
func (c *Client) TraceKey(ctx context.Context, key string, opts ...LookupOption) ([]Trace, error) {
	var t []Trace
	return t, c.Do(ctx, http.MethodGet, "/trace?"+lookupQuery("key", key, opts), nil, &t)
}

// HistorySample is the cluster at one moment (GET /history): messages
// stored and delivered per second (summed over realtime masters), the
// consumer groups' backlog (retries included) and the delay servers'
// pending messages.
type HistorySample struct {
	At           time.Time `json:"at"`
	InPerSec     uint64    `json:"inPerSec"`
	OutPerSec    uint64    `json:"outPerSec"`
	Backlog      uint64    `json:"backlog"`
	DelayPending uint64    `json:"delayPending"`
}

// History is the last hour of samples, oldest first, one every
// IntervalSeconds, as this meta server took them.
type History struct {
	IntervalSeconds float64         `json:"intervalSeconds"`
	Samples         []HistorySample `json:"samples"`
	// DeadLetters: the consumer groups holding dead letters at the last
	// sample that asked the brokers.
	DeadLetters []DeadGroup `json:"deadLetters"`
}

// DeadGroup is a consumer group that holds dead letters.
type DeadGroup struct {
	Subject     string `json:"subject"`
	Group       string `json:"group"`
	DeadLetters uint64 `json:"deadLetters"`
}

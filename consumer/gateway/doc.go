// Package gateway is qmq-gateway, an HTTP/1.1 + JSON gateway to a QMQ-Go
// cluster for programs in any language: publish, long-poll pull, ack and
// nack, a server-sent-events stream, and cancel or reschedule of delayed
// messages, described by the OpenAPI 3
// document served at /openapi.json (openapi.json beside this file, kept
// true by TestOpenAPI_MatchesGateway).
//
// # Layout
//
// The gateway is a client of the cluster, built on the Go producer and
// consumer and the meta server's routes (pkg/metaclient), so it lives under
// the client part that holds its state, consumer/: this package holds the
// handlers as a library (New, Start, Addr, URL, Close) and
// consumer/cmd/qmq-gateway/main.go only wires flags to Options. It imports
// no server package; its tests start a whole cluster in process.
//
// # Routes
//
//	POST /v1/publish                                   JSON batch {"messages":[…]}
//	POST /v1/subjects/{subject}/publish                raw body + QMQ-* headers (one message,
//	                                                   or a batch: application/vnd.qmq.mpub[-binary])
//	GET  /v1/subjects/{subject}/groups/{group}/messages?consumer=&max=&wait=&encoding=&start=
//	GET  /v1/subjects/{subject}/groups/{group}/stream  (same parameters; text/event-stream)
//	POST /v1/subjects/{subject}/groups/{group}/ack     {"consumer":"c1","ids":[…]}
//	POST /v1/subjects/{subject}/groups/{group}/nack    {"consumer":"c1","ids":[…],"retryAfter":"10s"}
//	POST /v1/subjects/{subject}/scheduled/cancel       {"targets":[{"key":"k1"},{"id":"m7"}]}
//	POST /v1/subjects/{subject}/scheduled/reschedule   {"targets":[{"key":"k1","delay":"2h"}]}
//	GET  /openapi.json, /metrics, /healthz, /readyz    (pkg/opsserver)
//
// # Publish
//
// Bodies are UTF-8 text, or base64 with "bodyEncoding":"base64"; "delay"
// (a Go duration) or "deliverAt" (RFC 3339) make a delayed message, which
// the producer sends to a delay group. A batch goes to the broker through
// producer.SendBatch (one send request per broker group, sent from the
// request's goroutine; retryable failures retried on the producer's queued
// path). A publish answers once every message is stored as producer.Send
// stores it (durable by default) or failed: 200 when all are stored; a
// problem document when all failed with one status (its "results" list
// each message); 207 with a status per message otherwise. A client that
// does not need the ids the gateway made asks for a short answer with
// Prefer: return=minimal (RFC 7240): a publish whose messages are all
// stored then answers {"stored":n} instead of ~50 bytes a message (a 5 KB
// answer to 100 messages cost the suite's Go client a fifth of its CPU:
// NOTES.md); 207s and problems are unchanged. Statuses are the broker's
// names (protocol.Status): "ok", "duplicate", "invalid", "too large",
// "busy", "beyond horizon", ….
// A raw publish's body is one message's body, or with Content-Type
// MediaTypeLines (application/vnd.qmq.mpub) a batch of bodies separated by
// newlines, or with MediaTypeBinary nsqd's /mpub?binary=true batch (a
// 4-byte count, then each body after its 4-byte length): the formats nsqd
// users have. Its QMQ-* headers describe every message of the request (as
// the JSON form's fields describe one); the answers are the JSON form's.
// The body is read into one pooled buffer sized from Content-Length and
// each message's body is a slice of it until SendBatch encodes it: no
// JSON and no copy of its own, the cheapest way to publish (NOTES.md). An
// empty line is refused (a lines body can be neither empty nor hold a
// newline), as are a malformed binary batch and limits passed: the whole
// request, none of it stored.
// A delayed message may carry a scheduleKey (with replace, it replaces
// the pending message with that key instead of being refused "schedule key
// exists", 409), and any message an expireAt (the properties
// qmq.schedule.key, qmq.schedule.replace and qmq.expire.at; headers
// QMQ-Schedule-Key, QMQ-Replace and QMQ-Expire-At on a raw publish).
//
// # Scheduled messages
//
// Cancel and reschedule take targets by schedule key or message id and go
// through the caller's producer (producer.CancelBatch, RescheduleBatch),
// with its definite answers per target: "cancelled" or "rescheduled"
// (never delivered at the old time; a second cancel answers cancelled
// again), "already fired", "not found". 200 when every target got one; a
// target whose delay servers did not all answer gets their failure status
// (207, or a problem when every target failed alike).
//
// # Consume
//
// A consumer is an id the HTTP client chooses and keeps. (consumer id,
// subject, group) is a session: a consumer.Puller under a consumer.Consumer
// with that consumer id, so brokers see the HTTP consumer as a native one,
// and the messages the session handed out and that are not acked or nacked
// yet, by message id. A pull waits up to wait (default 5 s, at most
// MaxWait) for at least one message and answers up to max. Ack and nack
// name message ids; nack's retryAfter chooses when the message comes back
// (default: the consumer's back-off), with its attempts raised. An id the
// session does not hold (never pulled, already acked, handed back) is
// named in a 404 problem's "unknown" list; the others are still done.
// start=earliest makes a new consumer group start at the oldest message.
//
// A session with no pull, ack or nack for ConsumerTimeout closes: its
// un-acked messages go back to the group at once. A gateway that dies
// leaves them to the brokers' consumer timeout, as a dead Go consumer does.
// Close ends long polls and streams (they answer what they have), waits
// for requests in flight, hands every session's un-acked messages back and
// flushes the producers.
//
// Any number of gateways can run behind a load balancer: they share no
// state. A consumer id's acks must reach the gateway that served its pulls
// (route by consumer id, or keep the connection): another gateway does
// not hold its messages and answers 404.
//
// # Errors and back-pressure
//
// Every error is an RFC 9457 application/problem+json document whose
// qmqStatus is the broker's status name. JSON is decoded strictly
// (unknown fields, trailing data: 400); bodies over MaxBodyBytes and
// batches over MaxBatch are 413; more than MaxInFlight messages being
// published, a busy broker or a full producer queue are 429 with
// Retry-After; an unavailable cluster is 503 with Retry-After.
//
// # Identities
//
// A request's Authorization header (Bearer name:secret, or Basic) is
// passed on to the cluster: the gateway keeps a producer, a meta client and
// consumers per identity, presenting that credential as a native client
// does (producer.WithCredentials), so brokers enforce the identity's
// permissions and a refusal comes back as 401 or 403. Requests without
// one use the gateway's own identity (--credentials-file), or are refused
// with --require-credentials. Connections to the cluster use TLS with
// --broker-tls-ca (and a client certificate with --broker-tls-cert: the
// gateway's own certificate identity); the HTTP listener serves HTTPS with
// --tls-cert and --tls-key. An HTTP client's own certificate cannot be
// presented to the cluster (the gateway lacks its key), so client
// certificates on the HTTP side are not mapped to identities yet: such a
// client sends its bearer credential.
//
// # Performance
//
// scripts/bench.sh gateway measures publish, consume and end-to-end
// latency against the native clients and nsqd's HTTP /mpub; NOTES.md
// keeps dated figures.
package gateway

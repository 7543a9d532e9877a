// Package consumer is the Go client that receives messages from QMQ-Go.
//
//	c, err := consumer.New(consumer.WithMetaServers("127.0.0.1:20880"), consumer.WithConsumerID("billing-1"))
//	defer c.Close(ctx)
//	sub, err := c.Subscribe("order.changed", "billing", func(ctx context.Context, m *consumer.Message) error {
//		return handle(m) // nil acks; an error retries later
//	}, consumer.StartEarliest(), consumer.Concurrency(8)) // a new group starts at the oldest message
//
// # Groups without partitions
//
// Every consumer group receives every message of its subject; within a group
// each message goes to one consumer. Consumers of a group share the group's
// cursor on every broker group of the subject: a consumer pulls from every
// broker group, each pull takes the next messages of the group there, and
// the broker records them in that consumer's own pull log. Consumers can be
// added or removed at any moment with no rebalance and no pause. A consumer
// that leaves with Close hands its un-acked messages back to the group at
// once; one that dies loses them to the group after the broker's consumer
// timeout. Consumer ids are stable across restarts of the same program
// (WithConsumerID overrides the default: host name and a hash of the
// executable's path and working directory), so a restarted consumer first
// gets back the messages it had not acked.
//
// # Acks, retries and dead letters
//
// A handler's nil return acks the message. An error retries it: the message
// is published again, with its attempt count raised, to the group's retry
// subject %RETRY%<subject>%<group> (which every subscription also pulls),
// due after a back-off (RetryBackoff: 5 s by default, doubling per attempt,
// at most 5 minutes), and acked only once that publish succeeded. A handler
// may choose the time with RetryAfter(d). Past MaxAttempts deliveries
// (default 16) the message goes to the dead-letter subject
// %DEAD%<subject>%<group> instead, which the admin tools list, re-drive or
// purge. Each copy says why (protocol.RecordFailure): the handler's error
// text (qmq.error, at most 1 KiB), when it failed (qmq.failed.at) and, on a
// dead letter, why it died (qmq.dead.why); its Attempts field counts the
// failed deliveries. A handler sees them on the retried message's
// Properties. Retries with a due time travel through the delay server when the
// cluster has one and through the retry subject's realtime groups otherwise;
// either way no handler sees a message before its deliver-at time: the
// consumer holds messages that arrive early.
//
// Acks are ranges of pull sequences: each pull loop acks the longest prefix
// of finished messages, one ack request in flight at a time, once the
// prefix holds half of MaxUnacked messages or its first message finished
// 5 ms ago (without that wait a consumer sent an ack per pull batch, as many
// ack requests as pulls). A pull loop stops pulling while too many of its
// messages are unfinished (MaxUnacked), which bounds memory; acks do not
// gate it. At that bound it pulls again once a batch has room (or half of
// MaxUnacked, if less), not when one message finishes, and a finished
// message wakes the ack and pull loops only when they have work: a consumer
// with slow handlers costs few wake-ups a message.
// A failed ack keeps its range for the next, which waits out a
// back-off (50 ms doubling to 1 s): retried once per finished message,
// acks to a restarting broker opened its circuit breaker for the pulls too.
// AckEach instead acks each message on its own once its handler returned,
// in pull-sequence order, many in flight (up to MaxUnacked, at most 1,024;
// the broker applies one consumer's acks in the order they arrive), and
// counts a message unfinished until its ack is answered. Acks ready at the
// same time share a request that names each pull seq (protocol.AckList, up
// to 256; never a range; one request each to a broker that predates
// lists). Acks are sent from the answers' callbacks, so those of a batch of
// answers leave in one write, and by ackLoop when none is in flight or 64
// are ready. A failed ack is sent again after the back-off.
//
// # Tracing
//
// WithTracerProvider turns OpenTelemetry on (pkg/tracing): a handle span
// per delivery of a message that carries a trace context, a child of the
// producer's send span, whose context the handler receives. Off by
// default.
//
// # Pulls in flight
//
// While a broker group answers full batches (a backlog), a pull loop keeps
// PullDepth pulls in flight (default 2), so the next batch is on its way
// while handlers work through this one; at the tail it sends one at a time,
// each a long poll. Only the pull sent with nothing in flight carries the
// exact KnownPullSeq the broker re-delivers above; the others are marked
// pipelined and get new messages only. Answers are taken in the order sent.
// A failed pull drops the answers still in flight (the broker re-delivers
// their messages to the next plain pull, in order) and the loop goes back
// to one pull at a time. Pulls in flight never ask for more than MaxUnacked
// leaves room for.
//
// # Pull API
//
// Callers who want to drive consumption themselves use Consumer.Puller and
// Puller.Pull(ctx, max), then Message.Ack or Message.Nack on each message.
//
// # Security
//
// Against a cluster that runs TLS, WithTLS gives the consumer's connections
// (pulls, acks and the retries it sends) a client config
// (pkg/tlsconfig.Client, from the cluster's CA file and, when the
// application proves its identity by certificate, its certificate). An
// identity proven by secret is given with WithCredentials,
// WithCredentialsFile or WithCredentialsFromEnv ($QMQ_CREDENTIALS,
// "name:secret"). The meta client (pkg/metaclient) takes the same options.
//
// # Goroutines
//
// Per subscription: one routeLoop (refreshes the broker groups), per broker
// group and subject one pullLoop and one ackLoop, and Concurrency
// handlerLoops. Close stops the pull loops, lets running handlers finish,
// sends the final acks with the release flag and waits for all of them.
package consumer

// Package producer is the Go client that sends messages to QMQ-Go.
//
//	p, err := producer.New(producer.WithMetaServers("127.0.0.1:20880")) // the meta server's TCP address
//	defer p.Close(ctx)
//	err = p.Send(ctx, &producer.Message{Subject: "order.changed", Body: body})
//
// Send returns once a broker has stored the message per its flush policy
// (durable by default); SendAsync queues the message and calls back. Messages
// are validated and encoded once, in the caller's goroutine, so a bad subject
// or an oversized body fails at once; the broker stores and serves those
// exact bytes.
//
// # Routing
//
// A Resolver (pkg/route) names the broker groups of a subject: the meta
// server through pkg/metaclient (WithMetaServers makes one; WithResolver
// shares one), or a static list (WithBrokers). Messages due 500 ms or
// more ahead (DeliverAt) go to delay groups, the rest to realtime groups.
// For each message the producer picks a group round-robin among the
// subject's writable groups, skipping groups whose circuit breaker is open
// and groups it is avoiding: after a failed request a group is avoided for a
// back-off that doubles per consecutive failure (100 ms to 10 s), and after
// a slow answer for a time that grows with the latency, the "latency fault
// tolerance" of RocketMQ's producer. When every group is avoided the one
// whose avoidance ends first is used.
//
// Routes are cached per subject for a second. A resolver whose answer does
// not depend on the subject (route.SubjectFree: a static list) gets one
// cached route for all subjects, so messages spread over thousands of
// subjects share one round-robin position instead of a map entry each.
//
// # Security
//
// Against a cluster that runs TLS, WithTLS gives the producer's connections
// a client config (pkg/tlsconfig.Client builds it from the cluster's CA
// file, and a client certificate when the application proves its identity
// with one). An identity proven by secret is given with WithCredentials,
// WithCredentialsFile or WithCredentialsFromEnv ($QMQ_CREDENTIALS,
// "name:secret"): each new connection presents it before its first
// request. A refused identity fails the message at once with an error that
// matches protocol.ErrUnauthenticated; a subject the identity may not
// publish to fails with protocol.ErrForbidden. The meta client
// (pkg/metaclient) takes the same options.
//
// # Batching and back-pressure
//
// One goroutine (sendLoop) owns the batches: it appends each queued message
// to its group's batch and sends a batch when it is full (WithBatch), when
// the queue has nothing more to add (so a lone message goes out at once), or
// after WithLinger when a linger is set. Under WithBusyLinger a batch that is
// not full waits (a bounded time) while its group has that many requests
// unanswered: a burst queued one message at a time then goes out as full
// requests rather than a small one each time the queue is momentarily
// empty (the delay server's forwarder uses it). Each group has at most
// WithMaxInFlight batches in flight; meanwhile batches grow. The queue is
// bounded (WithQueueSize): SendAsync blocks while it is full, or fails with
// ErrQueueFull under WithNonBlocking.
//
// # Synchronous Send
//
// A Send with nothing else queued for its group sends its message as a
// request of its own from the caller's goroutine and reads the answer there
// (no hand-off to sendLoop). While it waits it polls the connection for the
// answer for up to WithSendSpin (default 30 µs) before it blocks in the
// read: on a fast path the answer comes while the caller's thread still
// runs (pkg/transport, "Spin"). A broker whose answers take longer (a
// durable flush, a remote host) costs a few spins, then one now and then.
//
// # Batches
//
// SendBatch sends a slice of messages and waits, as Send does, with an
// error per message (nil when all are stored): the caller's goroutine
// encodes them and sends them as one request per broker group (WithBatch
// bounds a request), with no queued record or callback per message; a
// message whose try failed in a way a retry may fix takes the queued path
// below. Messages due 500 ms ahead go to delay groups, as Send's. The
// HTTP gateway (consumer/gateway) publishes every JSON batch with it.
//
// # Failures and retries
//
// A message whose broker answered a retryable status (readonly, not routed,
// busy, store error, …), or whose request failed in transport, is sent again
// to another group after a back-off, until it is stored or its send timeout
// (WithSendTimeout, default 30 s) passes; then its callback gets the last
// error. A broker that may have stored a message whose reply was lost can
// cause a duplicate (at-least-once); the message keeps its id, so a retry to
// the same group is dropped by the broker's dedupe window. Non-retryable
// statuses (invalid, too large, beyond the delay horizon) fail at once.
// Close stops taking messages, sends everything queued and waits for it.
//
// # Keys and tracing
//
// SetKey gives a message a business key (property qmq.key) that realtime
// brokers index: qmqctl lookup --key and trace --key find its messages.
// WithTracerProvider turns OpenTelemetry on (pkg/tracing: a send span per
// Send and per SendBatch, and per send request for SendAsync's messages, one sampling
// decision a request; a sampled span's W3C trace context is written into
// its messages' properties, so an unsampled SendAsync message costs
// nothing); off by default, when it costs a nil check.
package producer

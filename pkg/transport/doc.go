// Package transport is the client side of pkg/protocol: it sends requests
// to QMQ-Go servers over one pipelined TCP connection per server address and
// guards each address with a gobreaker v2 circuit breaker.
//
// # Use
//
//	c, err := transport.New(transport.Options{}, lg)
//	body, err := c.Call(ctx, addr, protocol.CmdLookup, req)          // waits
//	body, err = c.CallTimeout(ctx, addr, protocol.CmdSend, req, 2*time.Second) // its own timeout
//	err = c.Go(addr, protocol.CmdSend, batch, 0, func(body []byte, err error) {...}) // does not
//	err = c.GoInto(addr, protocol.CmdSyncLog, req, buf[:0], 0, fn)    // body read into buf when it fits
//	err = c.Notify(ctx, addr, protocol.CmdAck, ack)                   // one-way
//	if c.BreakerState(addr) == gobreaker.StateOpen { /* pick another group */ }
//	c.Close()
//
// With TLS and an identity (see "Security"):
//
//	tlsCfg, err := tlsconfig.Client(tlsconfig.Files{CA: "ca.pem"}, "")
//	creds, err := transport.CredentialsFromEnv() // QMQ_CREDENTIALS=name:secret
//	c, err := transport.New(transport.Options{TLS: tlsCfg, Credentials: creds}, lg)
//
// # Errors
//
// A response with a non-OK status is returned as a *protocol.Error carrying
// the status and the server's message, so errors.Is(err,
// protocol.ErrReadonly) works. Transport failures are sentinels that say
// whether the request may have reached the server:
//
//	ErrBreakerOpen, ErrDial, ErrRequestTooLarge, ErrClosed   not sent (NotSent reports true)
//	ErrConnClosed, ErrTimeout                                may have been received
//
// A cancelled context returns context.Canceled; a context whose deadline
// passed returns ErrTimeout, which also matches context.DeadlineExceeded.
//
// # Connections
//
// The first request to an address dials it (bounded by DialTimeout and the
// caller's context; concurrent callers share the dial). Requests are framed
// into the connection's write queue (1 MiB chunks, reused) under its mutex;
// a Call's body of 16 KiB or more is queued as it is, not copied, and the
// Call does not return while the queue refers to it (wqueue.go). A caller
// that finds nobody writing writes the queue itself (no hand-off for a lone
// request); what others queue meanwhile goes to a writer goroutine, which
// writes everything queued since its last write in one system call (a
// writev), so pipelined requests coalesce. The write deadline (WriteTimeout) is moved only when
// half of it has passed, not on every write. While the reader runs a batch of callbacks the buffer
// is corked, and the requests those callbacks send are written together at
// the end of the batch by the reader itself, as a server answers a read. The reader reads every whole frame
// already buffered, matches the batch to pending requests by request id
// under one lock, copies their bodies into one block (a caller that keeps
// one body keeps that read's block alive) and completes them. A GoInto
// request's body goes into the caller's buffer instead when it fits (a
// slave reuses its sync bodies: allocating and zeroing up to 2 MiB per
// fetch was 7% of its CPU); the buffers are looked up only while such a
// request is pending, so other traffic pays one atomic load per read.
//
// The reader is whoever holds the connection's reading role (reader.go): a
// Call that finds nobody reading takes it and reads the socket on its own
// goroutine until its response comes, completing the requests whose
// responses it reads on the way, then passes the role to a Call still
// waiting, or to the connection's readLoop goroutine when only Go requests
// are pending, or to nobody. One request in flight thus costs what a raw
// connection costs (write, then block in the read), without a wake-up of a
// reader goroutine and a hand-off to the caller; pipelined and asynchronous
// requests are read by readLoop as before. A leader alone, whose response
// is the one frame buffered, matches it and passes the role on under one
// lock and returns its result directly (readOwn), not through the batch and
// its result channel. The request path finds its peer and open connection
// without a lock (a copy of the peer map replaced when an address comes or
// goes, an atomic pointer to the open connection): on a 2-core machine a
// producer and its broker take turns on one core, so every step of a lone
// request is on the round trip. A leader blocked in the read is
// interrupted (a read deadline in the past) when its context ends or its
// deadline passes, and a frame it leaves half read is finished by the next
// reader. A connection nobody reads is given to readLoop by the sweep, so a
// server closing an idle connection is noticed within two sweeps. Responses
// may come in any order. When the connection drops (read or write error, a
// write that takes longer than WriteTimeout because the server stopped
// reading, or a malformed frame from the server) every pending request
// fails at once with ErrConnClosed, and the next request redials. A failed dial makes requests
// fail fast with ErrDial for a jittered back-off (pkg/jitter) that doubles from RedialBackoffMin
// to RedialBackoffMax and resets on success.
//
// With Options.Spin set, a leader whose read buffer is empty polls the
// socket without blocking (pkg/busypoll) for up to Spin before it blocks in
// the read. A lone request's answer on a fast path (loopback, a broker in
// the same rack with async flush) then comes while the caller's thread is
// still running, instead of the thread going to sleep in the kernel and
// being woken, which on a VM is a large part of such a round trip; the
// broker spins the same way for the client's next request (netserver,
// "Spin"). A connection whose answers keep coming later than Spin stops
// spinning after busypoll.GiveUp misses and probes once every
// busypoll.Probe reads. Under TLS the TCP socket is polled the same way.
// Measurements: NOTES.md.
//
// Deadlines: Call watches its context, so its deadline is exact. Every
// pending request also carries a deadline (the context's, or RequestTimeout,
// or CallTimeout's and Go's own timeout) that a sweep checks every 10 ms;
// that is how those timeouts are enforced without a timer per request. The same sweep forgets addresses with
// nothing in flight and no request for IdleTimeout, closing their
// connections, so the client's map does not grow forever.
//
// Go's callback runs on whichever goroutine reads the connection (readLoop,
// or a Call reading for itself) or on the sweep, so it must be quick and
// must not wait for any caller of the client; it may call Go again, which is
// how a producer keeps many batches in flight without a goroutine per
// request.
//
// # Security
//
// With Options.TLS every connection is a TLS client connection: the
// handshake follows the TCP dial, both within DialTimeout, and a config
// without ServerName checks each server's certificate for the host of its
// address (an IP address too). With Options.Credentials a new connection
// sends CmdAuth before any request and is handed to callers only after
// the server's StatusOK; the secret is in that frame only, never in an
// error or a log line. A failed handshake or a refused authentication
// ("refusal") fails the dial with ErrDial wrapping the cause — a refused
// identity matches protocol.ErrUnauthenticated and its message names the
// identity — is logged once at warn, and makes the address wait
// RedialBackoffMax before the next dial (calls meanwhile fail at once with
// the same error), since dialling again at once would only be refused
// again. A plaintext client on a TLS port fails its first request or its
// authentication; a TLS client on a plaintext port fails its handshake.
// Closing a connection closes its socket without TLS's closing alert,
// which could wait on a peer that stopped reading.
//
// # Unresponsive connections
//
// A connection whose requests time out is replaced, not kept. Every read
// of the socket that returns bytes is counted; when a request's deadline
// passes and nothing at all was read from its connection since the request
// was queued, the connection is sent a CmdPing with ProbeTimeout (default
// 1 s). Anything read before that deadline shows the server alive and the
// connection is kept: a long poll held by a live server, or a slow handler,
// costs a ping. Silence closes the connection (its pending requests fail
// with ErrConnClosed) and the next request dials afresh, instead of waiting
// for the kernel's backed-off retransmissions after a silent cut heals.
// The probe is written by the connection's writer goroutine, never by the
// goroutine that saw the timeout.
//
// # Circuit breakers
//
// Each address has a gobreaker.TwoStepCircuitBreaker. Any answer from the
// server counts as a success, whatever its status (business statuses say
// nothing about the address's health); the caller's own cancellation is
// excluded; dial failures, timeouts and dropped connections are failures.
// BreakerFailures consecutive failures open the breaker; after
// BreakerOpenTimeout it lets BreakerProbes requests through, and their
// success closes it. While it is open, requests fail with ErrBreakerOpen
// without being sent.
//
// A half-open breaker's probe counts as a success once it is sent on a
// connection, not when its answer comes (a long poll answers after
// seconds); a refused connection (see "Security") is the server's answer,
// not its failure, and an open breaker's error wraps the last dial error. A
// request to a healthy address skips the breaker and only failures are
// reported to it, which trips it exactly as if it had seen every request
// (NOTES.md, "Breaker details").
package transport

// Package netserver is the TCP server every QMQ-Go server runs on: a gnet v2
// event loop that frames pkg/protocol requests, hands them to a Handler off
// the loop, and writes the handler's replies, coalesced. With TLS it serves
// each connection on goroutines of its own instead of gnet, with the same
// API and framing (see TLS). It authenticates connections (Authentication)
// and bounds what a client can make it hold (Limits).
//
// # Use
//
//	mux := netserver.NewMux()                 // answers CmdPing itself, on the event loop
//	mux.HandleFunc(protocol.CmdSend, b.send)  // func(r *netserver.Request), off the loop
//	srv, err := netserver.New(netserver.Options{Addr: "127.0.0.1:0"}, mux, lg)
//	err = srv.Start()                         // returns once listening, or why not
//	addr := srv.Addr()                        // the real port when asked for port 0
//	err = srv.Close(ctx)                      // drain in-flight requests, then stop
//
// A handler answers each request exactly once with r.Reply(status, body...)
// or r.ReplyError(err), from any goroutine, now or later: a long-polling pull
// replies seconds later, a send after the store's group commit. One-way
// requests (protocol.FlagOneWay) get no reply. r.Done() is closed when the
// client's connection closes, so a parked request can be abandoned; replies
// to closed connections are dropped.
//
// # Request path
//
//	socket ─read─▶ event loop: OnTraffic ─batch─▶ serve goroutine ─Serve(r)─▶ handler
//	                                                                         │ r.Reply (any goroutine)
//	socket ◀─write─ event loop: flush ◀─AsyncWritev task─ reply buffer ◀─────┘
//
// OnTraffic runs once per socket read and splits every whole frame out of
// the inbound buffer (a frame left behind would wait for the client's next
// bytes). Until the first frame is whole it looks at that frame's header
// only, so a frame arriving over many reads is not copied again on each
// read; one larger than ReadBufferSize is moved out of gnet's buffer into
// chunks as it comes (see Limits). The read's frames are checked on the
// loop and copied out of gnet's buffer into one block (consecutive frames
// with one copy); the
// block goes to the connection's serve goroutine, which builds the Request
// values (each Body points into the block and its capacity ends at its
// length; a handler that keeps one request keeps that read's block alive),
// runs the handler for each request in arrival order, and returns when it
// has nothing left (the next batch starts it again). Handlers must therefore
// return quickly and move blocking work to their own goroutines. The serve
// loops run on serve workers: goroutines that park after a loop and take the
// next connection's batch, exiting after a second without work. A goroutine
// started per batch regrew its stack on every batch as the handler's calls
// went deep (stack copies and goroutine starts were about a tenth of the
// broker's CPU under a pull flood); a worker keeps its stack.
//
// Inline handlers: a handler that implements InlineHandler (Mux does, for
// commands registered with HandleInline; NewMux registers CmdPing that way)
// serves the commands it names on the event loop itself, with a body that
// points into gnet's buffer, and its replies are written at the end of the
// read with a direct write. That saves the two goroutine hand-offs of the
// normal path (loop to serve goroutine, serve goroutine to loop), which is
// most of a cheap request's cost; it is only for work that cannot block:
// ping, or answers made from memory. An inline handler that can only answer
// later (a send waiting for the store) calls r.Detach(): the detached
// request owns a copy of the body, may be answered from any goroutine and
// counts as in flight like any other; until then it answers on the loop,
// so a send the store takes at once is answered with the read's write.
// Work an inline handler's reply does not depend on (making a stored
// message readable, metrics) it leaves with r.AfterWrite: the loop runs it
// right after the read's write, before it reads again. The client and the
// server of a request-at-a-time exchange usually share one CPU (the kernel
// wakes the server where the client wrote), so what the server does before
// its write is the client's wait; what it does after overlaps with the
// client's next request whenever the client runs elsewhere.
//
// Replies are appended to the connection's reply buffer under a mutex.
// While the serve goroutine runs a batch the buffer is corked; at the end
// of the batch, or at once for a reply from another goroutine, one flush
// task is queued on the event loop with AsyncWritev. (Replies made on the
// loop itself, by inline handlers or for refused requests, go to a second
// buffer that only the loop touches, written without a lock at the end of
// the read.) The flush swaps the buffer
// out and writes all of it with one write (gnet copies what the socket does
// not take into the connection's outbound buffer), so many replies cost one
// system call. Reply copies the body slices into the reply buffer before it
// returns, so callers may reuse or release them at once: a broker can reply
// with message bytes that alias its storage. That copy is cheap next to the
// write itself, which copies every byte into the socket anyway, except for
// large bodies: ReplyRetained keeps slices of 16 KiB or more where they are
// (the reply buffer records where each goes), the flush writes the buffer's
// stretches and those slices with one writev (gnet copies what the socket
// does not take), then calls the reply's release; a closed connection
// releases what it never wrote. A slave's sync answers (up to 1 MiB of
// message log each) are written this way. A body made of many small
// pieces (a pull answer: an item header and a message each) goes through
// ReplyAppend instead: the body appends itself into the reply buffer
// (BodyAppender), sized once and copied once, not gathered through a slice
// of slices walked twice (the broker's CPU per pulled message fell ~9%).
//
// # Limits and bad input
//
// A frame with a bad magic, an unknown version or flags, or a body over
// MaxFrameSize closes the connection, as does a response frame sent by a
// client (a TLS ClientHello on a plaintext port is named as such in the
// log: "TLS handshake on a plaintext port"); an unknown command is the
// handler's to answer (Mux answers StatusUnknownCommand and the connection
// stays open). Every close the server decides is logged at warn level as
// "closing connection" with the connection id, remote address and a
// reason (at most 50 lines at once and 20 a second; the next line says
// how many were left out); a client that leaves in the middle of a frame
// is logged the same way. The event loop never blocks, so other
// connections are unaffected. A handler that panics is logged with its
// stack and its request answered StatusInternal; the server keeps running.
//
//	setting              default   past it
//	MaxConns             10000     a new connection is closed as soon as it is accepted
//	MaxConnsPerIdentity  1000      one more connection of an identity: StatusBusy, closed
//	MaxInFlight          4096      a request on a connection is answered StatusBusy on the loop
//	MaxOutboundBytes     64 MiB    unsent replies (a client that does not read): closed
//	MaxFrameSize         16 MiB    closed (malformed frame)
//	MaxPartialBytes      256 MiB   the connection that would grow it: StatusBusy, closed
//	IdleTimeout          10 min    no request in progress or in flight, no bytes: closed
//	MinReadRate          4 KiB/s   a frame in progress slower over ReadRateWindow (20 s): closed
//	HandshakeTimeout     10 s      a TLS handshake not done: closed
//
// MaxPartialBytes bounds the memory of frames that have not fully arrived,
// over all connections (partial.go): a small one waits in the read buffer;
// a large one (over ReadBufferSize) is moved at once into chunks mapped
// outside the Go heap, counted chunk by chunk as its bytes come, copied
// onto the heap once whole, and its chunks are unmapped (beyond a small
// reserve) as soon as it is served or its connection closes, so the memory
// returns to the system at once. A connection refused while still sending
// lingers a second, its answer written and its side shut down, discarding
// what comes, so that a reset does not overtake the answer (linger.go).
// IdleTimeout, MinReadRate and lingering are enforced by one sweep
// goroutine, every quarter of the shortest of them (5 to 250 ms): the
// loops only count bytes and requests, nothing per request. A sweep that
// comes late (the process stalled) starts the read-rate windows over.
//
// # TLS
//
// With Options.TLS the server listens through crypto/tls and each
// connection has two goroutines. Its reader is the connection's loop: it
// reads (a TLS read returns one record, at most 16 KiB), frames with the
// same code as OnTraffic (serveFrames), serves inline handlers, hands
// batches to the serve workers, and hands on the replies made on the loop;
// a frame larger than ReadBufferSize is read straight into its chunks.
// Its writer writes the reply buffer: all replies waiting, one TLS write.
// A read of a few requests with nothing waiting for the writer is answered
// by the reader itself, so a request-at-a-time client gets its answer
// without a hand-off between goroutines; the socket's writes never block
// (tlsSocket: what the socket does not take waits for the writer), so
// neither goroutine waits on a client that does not read, and
// MaxOutboundBytes counts the unsent bytes as on gnet. Everything else is
// the same API: Reply, ReplyAppend, inline handlers, Detach, AfterWrite,
// Done, the limits, the drain on Close. Differences: AfterWrite runs once
// the reader has written the read's replies or handed them to the writer;
// ReplyRetained copies (crypto/tls copies every byte into its records
// anyway); Spin does not apply (Go's scheduler spins before it parks a
// thread).
//
// The handshake runs on the connection's goroutine within
// HandshakeTimeout, so a slow one holds up nobody; the config is used as
// it is at each handshake, so GetCertificate or GetConfigForClient reload
// certificates. A failed handshake (a plaintext client, an unknown CA, an
// expired certificate) closes the connection, is counted in
// Stats.HandshakeFailures and logged at most 2 lines a second after a
// burst of 5. The server closes a TLS connection without close_notify
// (that is a write, which could block).
//
// Why not gnet with kernel TLS after a crypto/tls handshake: gnet has no
// TLS and its author plans none; kTLS needs the session's keys, IVs and
// record sequence numbers, which crypto/tls does not expose (only a debug
// key log, and a TLS 1.3 server has already sent session tickets under the
// traffic keys when the handshake returns); kTLS delivers a record that is
// not application data (an alert such as close_notify, a KeyUpdate or a
// ticket) only to recvmsg with a control message and fails a plain read
// with EIO, and gnet reads with read(2) and has no hook for control
// messages, so such records would break connections or need a TLS state
// machine outside crypto/tls; key updates need a recent kernel; and the
// tls module, its ciphers and its offload vary by host. crypto/tls is
// built for a goroutine per connection, which is what Go's netpoller
// serves well; plaintext keeps gnet, unchanged.
//
// # Authentication
//
// Options.Auth (an *auth.Authority) checks credentials. A connection gets
// an identity from a verified TLS client certificate (a qmq:// URI SAN, at
// the handshake) or a successful CmdAuth, and is then held to that
// identity's grants; without Auth, CmdAuth is answered with auth.Open's
// identity and changes nothing. Without RequireAuth a connection that
// named no identity is auth.Open. With RequireAuth every request of a
// connection without an identity but CmdPing and CmdAuth is answered
// StatusUnauthenticated on the loop and never reaches the handler. netserver serves CmdAuth itself, off the loop (a secret's hash
// is slow), one at a time per connection: protocol.AuthResponse, or
// StatusUnauthenticated whether the name or the secret was wrong; the
// third failure closes the connection once answered. Handlers check
// Conn.Principal() and refuse with Request.Refuse (StatusForbidden).
// Once per read, for a connection with an identity, the loop compares Auth.Version() with
// the version it last saw; when it moved, the connection's principal is
// refreshed before the read's requests are served: new grants apply from
// the next request, and a removed or disabled identity is dropped (its
// requests are refused until CmdAuth succeeds again). Refusals are counted
// in Stats and logged at most 2 lines a second after a burst of 5, with
// the identity, remote address, command and reason; secrets never are.
//
// # Exposure
//
// A server refuses to listen on a non-loopback address (any host but
// 127.0.0.0/8, ::1 and localhost, an empty host included) without both TLS
// and RequireAuth, unless Options.Insecure: New fails with an error
// wrapping ErrInsecureListener that names the address and what is
// missing. pkg/exposure holds the rule for the other listeners (the
// operations and admin HTTP servers). CmdAuth carries a secret, so a
// server that requires authentication takes it in the clear only where
// the rule lets it run without TLS: on loopback, or insecure.
//
// # Shutdown
//
// Close stops accepting connections and answers new requests with
// StatusShuttingDown, then waits until every request handed to a handler
// has been answered and its reply written (or its connection closed), or
// until its context ends, and then stops gnet, which closes the remaining
// connections. The wait is a count of held requests kept per connection
// on the event loop; see Conn.
//
// gnet is stopped by shutting its listening socket down, not with
// Engine.Stop: Engine.Stop tells gnet's acceptor and its event loops to
// exit at the same moment, so a client redialling then could be accepted
// and handed to a loop that had already exited; that connection was never
// served nor closed and its client waited on it forever (seen as pulls
// timing out after a broker restart in the same process). A shut-down
// listener refuses new connections and resets those not yet accepted; the
// acceptor's next accept fails, it exits, and only then does gnet stop the
// loops, so every accepted connection reaches a loop and is closed there.
// gnet reports that failed accept as an error, which the server logs at
// debug level while closing. (Close also no longer waits for gnet's 500 ms
// shutdown poll.)
//
// # Spin
//
// A loop whose only connection had every request of a read answered on
// the loop (inline handlers), with nothing of it still with a handler,
// polls that connection's socket without blocking (poll(2), timeout 0) for
// up to Options.Spin (default 30 µs) before OnTraffic returns; when the
// next request comes meanwhile, gnet's next look at its poller, which does
// not block right after events, finds it. A client with one request in
// flight (a producer's synchronous Send) then sends its next request while
// the loop is still awake, instead of the loop going to sleep in the kernel
// and being woken for it, which on a VM is a large part of a loopback
// round trip. Go's scheduler does the same before it parks a
// thread, which is where a goroutine-per-connection server (nsqd) waits.
// The conditions keep the spin from costing anyone else: another
// connection of the loop could have bytes waiting (the loop has no cheap
// way to know), and a reply still to come from a handler is written by the
// loop (its task would wait). The price is up to Spin of CPU after an
// answered read when the next request does not come; a connection whose
// last 8 spins all missed (a client far away, or one that sends rarely)
// stops spinning and tries again once every 64 answered reads, so it costs
// a few spins, not one per request. (Measurements: NOTES.md.)
//
// # Design notes
//
// One event loop per four CPUs by default (Options.EventLoops); the loop
// only frames bytes and writes replies. Keep-alive is set per connection in
// OnOpen, and off-loop code uses only AsyncWritev and Close (gnet v2.9.7's
// Conn is not safe off the loop otherwise). Why, and the gnet behaviours a
// gnet upgrade must keep true: NOTES.md, "Design notes".
package netserver

// Package netserver is the TCP server every QMQ-Go server runs on: a gnet v2
// event loop that frames pkg/protocol requests, hands them to a Handler off
// the loop, and writes the handler's replies, coalesced, in the clear or
// through a TLS session run on the same loop (TLS). It authenticates
// connections (Authentication) and bounds what a client can make it hold
// (Limits).
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
// or r.ReplyError(err), from any goroutine, now or later. One-way requests
// (protocol.FlagOneWay) get no reply. r.Done() is closed when the client's
// connection closes; replies to closed connections are dropped.
//
// # Request path
//
//	socket ─read─▶ event loop: OnTraffic ─batch─▶ serve worker ─Serve(r)─▶ handler
//	                                                                      │ r.Reply (any goroutine)
//	socket ◀─write─ event loop: flush ◀─AsyncWritev task─ reply buffer ◀──┘
//
// OnTraffic splits every whole frame out of the read, checks it on the loop
// and copies the read's frames into one block; a serve worker (a goroutine
// that keeps its stack between batches, so deep handler calls do not regrow
// it) builds the Request values, whose bodies point into that block, and
// runs the handler for each in arrival order. Handlers must return quickly.
// Until a frame is whole only its header is looked at; a frame larger than
// ReadBufferSize gets a buffer from a bounded pool (Options.FramePoolBytes)
// and the rest of it is read from the socket straight into that buffer,
// past gnet's (or, once half of MaxPartialBytes is so reserved, into
// chunks as it comes, then copied into one; Limits): a handler done with
// such a body gives the buffer back with r.Release(), else the garbage
// collector takes it (framepool.go).
//
// Inline handlers (InlineHandler; Mux.HandleInline; CmdPing) run on the
// event loop with a body pointing into gnet's buffer and reply at the end
// of the read with a direct write, saving the two goroutine hand-offs that
// are most of a cheap request's cost. They must not block: one that can
// only answer later calls r.Detach() (the request then owns a copy of its
// body and may be answered from any goroutine). Work the reply does not
// depend on goes to r.AfterWrite, run right after the read's write.
//
// Replies are appended to the connection's reply buffer under a mutex,
// corked while a batch runs; one flush task per batch (or per reply from
// another goroutine) writes all of it with one write. Reply copies its
// body, so callers may reuse it at once; ReplyRetained keeps slices of
// 16 KiB or more where they are and writes them with one writev, then calls
// their release; ReplyAppend lets a body of many small pieces append itself
// into the reply buffer (a pull answer), sized once and copied once.
//
// # Limits and bad input
//
// A frame with a bad magic, an unknown version or flags, a body over
// MaxFrameSize, or a response frame sent by a client closes the connection
// (a TLS ClientHello on a plaintext port is named as such). An unknown
// command is the handler's to answer (Mux: StatusUnknownCommand, the
// connection stays open). Every close the server decides is logged at warn
// ("closing connection", with the connection, remote address and reason; at
// most 50 lines at once and 20 a second, the next line says how many were
// left out). A handler that panics is logged with its stack and its request
// answered StatusInternal.
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
// MaxPartialBytes bounds the memory of frames not fully arrived, over all
// connections (partial.go): a large frame is reserved whole when its header
// comes, while such frames hold at most half of it, or else moved into
// chunks mapped outside the Go heap, counted as its bytes come and unmapped
// as soon as it is served or its connection closes, so the memory returns
// to the system at once. A connection refused while still sending lingers a second,
// discarding what comes, so that a reset does not overtake its answer
// (linger.go). One sweep goroutine enforces IdleTimeout, MinReadRate and
// lingering every quarter of the shortest of them (5 to 250 ms); the loops
// only count bytes and requests.
//
// # TLS
//
// With Options.TLS each connection has a crypto/tls session whose
// transport is memory (tlsConn), not the socket: gnet still reads and
// writes the socket. The handshake (blocking, and CPU-heavy) runs on a
// goroutine of the connection, which waits for the bytes the loop hands it
// and writes with AsyncWritev, within HandshakeTimeout; bytes that come
// meanwhile are kept, counted in MaxPartialBytes. Once it is done the
// session is the loop's alone: OnTraffic gives it the read's bytes,
// decrypts record by record until they are used up (the transport then
// answers a temporary error, which crypto/tls does not keep) and frames
// the plaintext as on plaintext; the flush and the end of a read encrypt
// the reply buffer and write all its records with one write. So a TLS
// connection has the plaintext path's costs plus the cipher's: no
// goroutine per connection, no hand-off between a reader and a writer,
// Spin, one write per flush. ReplyRetained copies (the cipher copies every
// byte anyway). A large reply is encrypted on the loop (a few GB/s).
//
// The config is used as it is at each handshake, so GetCertificate or
// GetConfigForClient reload certificates. A failed handshake closes the
// connection, is counted (Stats.HandshakeFailures) and logged at a rate
// limit. A refused connection lingers after close_notify.
//
// Not gnet with kernel TLS: kTLS needs the session's keys and sequence
// numbers, which crypto/tls does not expose, and delivers records that are
// not application data only through control messages gnet cannot read.
// NOTES.md has the details and the earlier goroutine-per-connection design.
//
// # Authentication
//
// Options.Auth (an *auth.Authority) checks credentials. A connection gets
// an identity from a verified TLS client certificate (a qmq:// URI SAN) or
// a successful CmdAuth, which netserver serves itself, off the loop (a
// secret's hash is slow), one at a time per connection; a wrong name or
// secret is StatusUnauthenticated alike and the third failure closes the
// connection. Without Auth, CmdAuth is answered with auth.Open's identity.
// With RequireAuth every request but CmdPing and CmdAuth of a connection
// without an identity is answered StatusUnauthenticated on the loop.
// Handlers check Conn.Principal() and refuse with Request.Refuse
// (StatusForbidden). When Auth.Version() moves, a connection's principal is
// refreshed before its next read is served: new grants apply from the next
// request, and a removed or disabled identity is dropped. Refusals are
// counted in Stats and logged at a rate limit, without secrets.
//
// # Exposure
//
// A server refuses to listen on a non-loopback address (any host but
// 127.0.0.0/8, ::1 and localhost, an empty host included) without both TLS
// and RequireAuth, unless Options.Insecure: New fails with an error
// wrapping ErrInsecureListener. pkg/exposure holds the rule for the HTTP
// listeners. CmdAuth carries a secret, so it is taken in the clear only
// where the rule lets a server run without TLS.
//
// # Shutdown
//
// Close stops accepting, answers new requests with StatusShuttingDown,
// waits until every request handed to a handler has been answered and its
// reply written (or its connection closed) or until its context ends, and
// then stops gnet. gnet is stopped by shutting its listening socket down,
// not with Engine.Stop, so that every accepted connection reaches a loop
// and is closed there (NOTES.md, "Design notes").
//
// # Spin
//
// A gnet loop whose only connection had every request of a read answered
// on the loop polls that socket without blocking for up to Options.Spin
// (default 30 µs) before it returns to gnet, so a request-at-a-time
// client's next request finds the loop awake instead of asleep in the
// kernel (on a VM, a large part of a loopback round trip). It spins only
// with nothing of the connection still with a handler; a connection whose
// last 8 spins all missed stops spinning and tries again once every 64
// answered reads (pkg/busypoll).
//
// # Design notes
//
// One event loop per four CPUs by default (Options.EventLoops). Keep-alive
// is set per connection in OnOpen, and off-loop code uses only AsyncWritev
// and Close (gnet v2.9.7's Conn is not safe off the loop otherwise). Why,
// the measurements behind these choices, and the gnet behaviours a gnet
// upgrade must keep true: NOTES.md.
package netserver

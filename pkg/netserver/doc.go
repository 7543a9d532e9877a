// Package netserver is the TCP server every QMQ-Go server runs on: a gnet v2
// event loop that frames pkg/protocol requests, hands them to a Handler off
// the loop, and writes the handler's replies, coalesced.
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
// only, so a large frame arriving over many reads is not copied again on
// each read. The read's frames are checked on the loop and copied out of
// gnet's buffer into one block (consecutive frames with one copy); the
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
// client; an unknown command is the handler's to answer (Mux answers
// StatusUnknownCommand and the connection stays open). A connection whose
// unsent replies pass MaxOutboundBytes (a client that does not read) is
// closed, and so is a connection over MaxConns as soon as it is accepted.
// A request beyond MaxInFlight unanswered requests on its connection is
// answered StatusBusy on the loop. Every close the server decides is logged
// at warn level as "closing connection" with the connection id, remote
// address and a reason; a client that leaves in the middle of a frame is
// logged the same way. The event loop never blocks, so other connections
// are unaffected. A handler that panics is logged with its stack and its
// request answered StatusInternal; the server keeps running.
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
// a few spins, not one per request.
//
// Measured (interleaved rounds of the sync suite's workload, 12 rounds of
// 1 s each for each server, fresh nsqd, load average ~1): ours against
// nsqd 1.055 without the spin, 1.108 with it (spin/none 1.05); the same
// polling put into gnet's own loop instead (an experiment on a local copy)
// gave 1.08 over none. Pinning the broker to one CPU and the clients to the
// other (taskset, an experiment) had given ours/nsqd 1.080 against 0.978
// unpinned: what separated the two servers was where and how the server
// waited, not the work of a request.
//
// # Design notes
//
//   - One event loop per four CPUs by default (Options.EventLoops). The loop
//     only frames bytes and writes replies; handlers run on other
//     goroutines. On the 2-core machine the rpc bench ran slower with two
//     loops than with one.
//   - The cost of the off-loop path is its two hand-offs, not the copying:
//     on the shared 2-core machine a batch of 128 pings spent about 20 µs
//     waiting to be scheduled between goroutines (the handler path reached
//     about 0.75 of the plain net server's pipelined rate, the inline ping
//     about 1.0; see scripts/qmqbench/rpc.go). A handler whose work is
//     itself a non-blocking hand-off (decode, then push into a queue with a
//     select/default, replying later) may register with HandleInline and
//     skip both.
//   - Keep-alive (Options.TCPKeepAlive) is set on each connection in OnOpen,
//     not with gnet.WithTCPKeepAlive: with that option gnet v2.9.7 sets it on
//     the listener's descriptor even after a failed bind has closed it, so
//     an address in use was reported as "setsockopt: bad file descriptor"
//     (seen as a rare CI failure of a test whose picked port another test
//     took), and a descriptor number reused meanwhile by another goroutine
//     would have become gnet's listener, to be closed under its owner.
//   - gnet v2.9.7's Conn.Context, RemoteAddr and Write are not safe off the
//     loop: Conn captures the remote address in OnOpen, and off-loop code
//     uses only AsyncWritev and Close.
//   - An off-loop AsyncWritev or Close after the engine stopped (a reply
//     that passed the closed check just before OnClose, after the drain
//     timed out) calls gnet's Poller.Trigger on a closed poller. That is
//     harmless in v2.9.7, read in its source: every loop exits by running
//     the engine's shutdown task, which returns before the poller clears
//     its wake-up flag, so a later Trigger only queues a task nobody runs
//     and never writes to the eventfd's (closed, perhaps reused)
//     descriptor number. A gnet upgrade must keep that true, or netserver
//     must stop calling into gnet once Close stops the engine.
//   - gnet logs through the server's logger until Close, then through a
//     no-op logger (gnet keeps its logger process-wide).
//   - Each time a gnet v2.9.7 loop runs out of events it polls once more
//     and calls runtime.Gosched before it blocks; with an idle P that wakes
//     a second OS thread (a futex, and an IPI to an idle vCPU) which finds
//     nothing to do. With one request in flight that is once per request:
//     against nsqd, a local copy of gnet without the call (an experiment,
//     never used) ran the sync suite's workload 8% faster, and GOMAXPROCS=1
//     (no idle P) 4.5% faster. No gnet option avoids it (WithLockOSThread
//     is slower still: every Gosched then hands the loop between threads).
//     Measured again later (20 and 12 interleaved rounds), the copy without
//     the call ran at 0.975 and 0.94 of the unchanged loop: the second
//     thread's spin also keeps a vCPU awake. Spin (above) takes the wake-up
//     out of the way instead.
package netserver

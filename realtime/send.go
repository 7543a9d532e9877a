package realtime

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/tracing"
	"github.com/qmq-go/qmq/realtime/store"
	"go.uber.org/zap"
)

// inlineSendBytes bounds the send requests served on the event loop: a
// bigger one (up to the frame limit) costs enough checking (CRC, limits,
// dedupe) to delay the loop's other connections, so it goes to a goroutine.
const inlineSendBytes = 64 << 10

// serveSendInline is the send handler; it runs on the event loop (the mux
// registers it with HandleInline), which saves the hand-off to a serve
// goroutine for the small requests most sends are. It never blocks. When
// the store can write at once (store.TryWriteViewsNow: FlushAsync, nothing
// else appending) the reply is made on the loop and written at the end of
// the read, and the records are published after that write (AfterWrite),
// so a lone send crosses no goroutine at all. Otherwise the request is
// detached (its body copied, to be answered from the store's commit
// goroutine, the parsed views moved into the copy) and queued
// (store.NoWait); big requests and a full append queue go to a goroutine.
// Either way each message is parsed and checked once, here: the store takes
// the views.
func (b *Broker) serveSendInline(r *netserver.Request) {
	if len(r.Body) > inlineSendBytes {
		go b.sendRequest(r.Detach(), true)
		return
	}
	b.sendRequest(r, false)
}

// sendRequest stores a batch of messages: each is checked (CRC, limits,
// subject), dropped as a duplicate when its (subject, id, attempts) was
// stored within the dedupe window, and the rest go to the store in one
// append; the reply carries one status per message, once they are durable.
// With blocking false it runs on the event loop and must not block.
func (b *Broker) sendRequest(r *netserver.Request, blocking bool) {
	t := b.cur()
	if err := b.writable(t); err != nil {
		r.ReplyError(err)
		r.Release()
		return
	}
	s := newSendCall(b, t)
	sr, err := protocol.NewSendReader(r.Body)
	if err != nil {
		s.badRequest(r, err)
		return
	}
	if err := b.checkEpoch(t, sr.Epoch); err != nil {
		r.ReplyError(err)
		s.free()
		r.Release()
		return
	}
	n := sr.Count
	// Appending at once: on the loop, without waiting for the slave.
	direct := !blocking && !t.waitsForSlave()
	s.reset(n)
	// Split, parse and check every message, and hash the ids, before
	// reserving any: reading every id's dedupe slot first, in one tight
	// loop (dedupe.touch), lets the cache misses of a batch overlap, where
	// reserving as each message was parsed waited out one miss after
	// another (~15% of a master's CPU when producing). Each message is
	// split from the body as it is checked (protocol.SendReader), not all
	// first. A malformed body is refused whole: nothing is reserved or
	// stored before its end is read.
	dedupe := t.dedupe.enabled()
	var touched uint64
	publish := auth.NewPublishCheck(r.Conn.Principal())
	s.req.Epoch, s.req.Messages = sr.Epoch, slices.Grow(s.req.Messages[:0], n)
	for i := range n {
		raw, err := sr.Next()
		if err != nil {
			s.badRequest(r, err)
			return
		}
		s.req.Messages = append(s.req.Messages, raw)
		v, err := protocol.ParseMessage(raw)
		if err == nil {
			err = b.limits.CheckView(&v)
		}
		if err == nil && !publish.Allowed(v.Subject) {
			s.statuses[i] = protocol.StatusForbidden
			r.NoteRefusal(protocol.StatusForbidden, "publish to "+string(v.Subject))
			continue
		}
		if err != nil {
			s.statuses[i] = protocol.StatusOf(err)
			b.metrics.rejected.WithLabelValues(s.statuses[i].String()).Inc()
			if s.statuses[i] == protocol.StatusInternal {
				s.statuses[i] = protocol.StatusInvalid
			}
			b.lg.Debug("message rejected", zap.String("conn", r.Conn.String()), zap.Error(err))
			continue
		}
		s.views = append(s.views, v) // one per message not rejected; duplicates are taken out below
		if b.tracer != nil && v.PropertyCount() > 0 && tracing.ViewCarries(&v) {
			s.traced = append(s.traced, i)
		}
		if dedupe {
			s.keys[i] = t.dedupe.key(v.Subject, v.ID, v.Attempts)
		}
	}
	if err := sr.End(); err != nil {
		s.badRequest(r, err)
		return
	}
	b.metrics.received.Add(float64(n))
	if dedupe {
		// A tight loop of independent loads: the processor keeps many of
		// their misses in flight at once.
		for i, k := range s.keys {
			if s.statuses[i] == protocol.StatusOK {
				touched ^= t.dedupe.touch(k)
				s.reserved[i] = true
			}
		}
		s.touched = touched
		// Each shard's lock once for the batch: reserved stays set for
		// the keys that were new.
		t.dedupe.reserveBatch(s.keys, s.reserved, s.order)
	}
	// s.views holds a view per message not rejected; those of duplicates
	// are taken out as they are found: read counts the views passed, and
	// each kept one moves down to len(s.index).
	read := 0
	for i := range s.req.Messages {
		if s.statuses[i] != protocol.StatusOK {
			continue
		}
		read++
		if dedupe && !s.reserved[i] {
			s.statuses[i] = t.duplicateStatus(s.keys[i])
			b.metrics.duplicates.Inc()
			continue
		}
		if k := len(s.index); k != read-1 {
			s.views[k] = s.views[read-1]
		}
		s.index = append(s.index, i)
	}
	clear(s.views[len(s.index):])
	s.views = s.views[:len(s.index)]
	s.results = s.results[:len(s.views)]
	if len(s.views) == 0 {
		r.Reply(protocol.StatusOK, protocol.AppendSendResponse(nil, s.statuses))
		s.free()
		r.Release()
		return
	}
	s.start = r.Arrived // appendSecs measures from the request's arrival
	if !blocking {
		// A reply made now goes out with the loop's write at the end of the
		// read, unless it must wait for the slave.
		if direct {
			if w, ok := t.store.TryWriteViewsNow(s.views, s.results); ok {
				// The records are in the log: answer now, and publish them
				// (index, wake readers) and count them once the answer is
				// on the socket (AfterWrite).
				s.r, s.written = r, w
				s.settle(s.results)
				b.replyStored(s, s.results, true) // at once: direct means no wait for the slave
				r.AfterWrite(s)
				return
			}
		}
		// Answer later: keep a copy of the body and move the views into it
		// (re-sliced by their lengths: nothing is parsed again).
		r = r.Detach()
		s.req.Move(r.Body)
		for j, i := range s.index {
			s.views[j].Move(s.req.Messages[i])
		}
	}
	s.r = r
	// The messages were parsed and checked above (CRC, limits): the store
	// takes the views.
	if !blocking {
		err = t.store.AppendAsync(s.views, s.results, s.done, store.NoWait)
		if errors.Is(err, store.ErrWouldBlock) {
			go func() {
				if err := t.store.AppendAsync(s.views, s.results, s.done); err != nil {
					s.failed(err)
				}
			}()
			return
		}
	} else {
		err = t.store.AppendAsync(s.views, s.results, s.done)
	}
	if err != nil {
		s.failed(err)
	}
}

// sendCall is one send request between its checks and its reply. Calls
// go back to sendCalls and are reused with their slices once their reply
// is made (on the event loop: the common case of a producer waiting for
// each message under FlushAsync, where such a send allocates nothing; or
// from the store's callback, or once the slave's acknowledgement lets the
// reply go), except those that failed: the garbage collector takes those.
type sendCall struct {
	b        *Broker
	t        *term // the term the request was taken in
	r        *netserver.Request
	req      protocol.SendRequest
	statuses []protocol.Status
	keys     []uint64
	reserved []bool
	order    []int32         // dedupe.reserveBatch's scratch
	views    []protocol.View // the messages to store, parsed and checked
	touched  uint64          // what dedupe.touch read (kept so the reads stay)
	index    []int           // batch (views) position → request position
	traced   []int           // with a tracer: the request positions of messages that carry a trace context
	results  []store.Result  // one per view
	written  store.Written   // what TryWriteViewsNow wrote, published by AfterWrite
	stored   int             // messages stored (settle)
	start    time.Time
	// one backs the slices above for a request of one message.
	one struct {
		status   [1]protocol.Status
		key      [1]uint64
		reserved [1]bool
		order    [1]int32
		view     [1]protocol.View
		index    [1]int
		result   [1]store.Result
	}
}

var sendCalls = sync.Pool{New: func() any { return new(sendCall) }}

func newSendCall(b *Broker, t *term) *sendCall {
	s := sendCalls.Get().(*sendCall)
	s.b, s.t = b, t
	return s
}

// reset sizes the call for a request of n messages, reusing its slices
// (a new call's one-message arrays for n == 1).
func (s *sendCall) reset(n int) {
	if cap(s.statuses) < n && n == 1 {
		s.statuses, s.keys, s.reserved, s.order = s.one.status[:], s.one.key[:], s.one.reserved[:], s.one.order[:]
		s.views, s.index, s.results = s.one.view[:0], s.one.index[:0], s.one.result[:]
	}
	s.statuses = resize(s.statuses, n)
	s.keys = resize(s.keys, n)
	s.reserved = resize(s.reserved, n)
	if cap(s.order) < n {
		s.order = make([]int32, n)
	}
	s.order = s.order[:n]
	s.views, s.index = slices.Grow(s.views[:0], n), slices.Grow(s.index[:0], n)
	s.results = resize(s.results, n)
	s.traced = s.traced[:0]
}

// resize returns a zeroed slice of n elements, reusing s's array when it
// is big enough.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// free puts a call whose reply is made back into sendCalls, without its
// references to the request's bytes, and gives the request's body back to
// the server (netserver.Request.Release: a large frame's buffer is reused
// for the next one). Every path that frees a call with its request is done
// with the body: the reply is encoded (Reply copies), the store has
// written the messages (done runs once they are in the log; the store
// reads no view past done: its write batch reads large bodies only during
// the write, the index feed takes hashes, tracing copies what it keeps),
// the dedupe cache holds hashes, and a reply held for the slave frees the
// call only once it is made (replyStored), the slave reading the log, not
// the body.
func (s *sendCall) free() {
	if s.r != nil {
		s.r.Release()
	}
	clear(s.req.Messages)
	clear(s.views)
	s.b, s.t, s.r, s.req.Messages = nil, nil, nil, s.req.Messages[:0]
	s.written = store.Written{}
	s.traced = s.traced[:0]
	sendCalls.Put(s)
}

// done completes the call with the store's results, and puts it back for
// reuse unless its reply waits for the slave.
func (s *sendCall) done(results []store.Result) {
	b := s.b
	stored := s.settle(results)
	b.metrics.stored.Add(float64(stored))
	b.metrics.appendSecs.Observe(time.Since(s.start).Seconds())
	if !b.replyStored(s, results, false) {
		s.free()
	}
}

// AfterWrite ends a send whose records TryWriteViewsNow wrote and whose
// reply is written (netserver.Request.AfterWrite): it publishes the
// records, counts them and puts the call back for reuse.
func (s *sendCall) AfterWrite() {
	b := s.b
	s.written.Publish()
	b.metrics.stored.Add(float64(s.stored))
	b.metrics.appendSecs.Observe(time.Since(s.start).Seconds())
	s.free()
}

// settle sets the statuses of the messages the store refused and gives
// their dedupe keys back; it returns (and keeps, for AfterWrite) how many
// were stored.
func (s *sendCall) settle(results []store.Result) int {
	b := s.b
	stored := 0
	for j, res := range results {
		i := s.index[j]
		if res.Err == nil {
			stored++
			continue
		}
		if s.reserved[i] {
			s.t.dedupe.release(s.keys[i])
		}
		s.statuses[i] = appendStatus(res.Err)
		b.metrics.rejected.WithLabelValues(s.statuses[i].String()).Inc()
	}
	s.stored = stored
	if len(s.traced) > 0 {
		b.traceStored(s, results)
	}
	return stored
}

// badRequest refuses a malformed request body whole (StatusBadRequest) and
// frees the call, which holds no reservation yet.
func (s *sendCall) badRequest(r *netserver.Request, err error) {
	r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, err.Error()))
	s.free()
	r.Release()
}

// failed answers a call the store did not take.
func (s *sendCall) failed(err error) {
	for j := range s.views {
		if i := s.index[j]; s.reserved[i] {
			s.t.dedupe.release(s.keys[i])
		}
	}
	s.r.ReplyError(protocol.Errorf(protocol.StatusShuttingDown, fmt.Sprintf("store: %v", err)))
	s.r.Release() // the store refused the views: it holds none of them
}

// waitsForSlave reports whether send replies wait for the slave's copy.
func (t *term) waitsForSlave() bool { return t.sync != nil && t.sync.wait.Load() }

// appendStatus maps a store append error to the message's status.
func appendStatus(err error) protocol.Status {
	if st := protocol.StatusOf(err); st != protocol.StatusInternal {
		return st
	}
	return protocol.StatusStoreError
}

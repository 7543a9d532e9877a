package store

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/segment"
)

// directAppend is the writer's state that appendLoop shares with
// tryAppendNow. Whoever holds mu writes the message log: appendLoop while it
// appends and publishes (or hands to syncLoop) a group, tryAppendNow while
// it appends one request on its caller's goroutine.
type directAppend struct {
	mu sync.Mutex
	// queued counts requests given to appendLoop and not yet through it;
	// tryAppendNow appends only when it is zero, so it never overtakes a
	// queued request (a connection's requests stay in order).
	queued atomic.Int64
	batch  *segment.Batch
	head   [recordHeadSize]byte
	// req is the request tryAppendViewsNow appends, reused (mu held).
	req appendReq
	// written is the group TryWriteViewsNow wrote and PublishWritten
	// publishes (mu held), nil when nothing was written.
	written *commitGroup
}

// noDone is the callback of a request that tryAppendNow appends: it
// returns the results instead.
func noDone([]Result) {}

// tryAppendNow appends msgs on the caller's goroutine and returns their
// results (as AppendAsync's callback would get them) when it can do so
// without waiting and without slow file operations: under FlushAsync (a
// durable append waits for a sync, so FlushSync always queues), with no
// other append queued or running, every subject already known, and the
// records fitting in the current message-log segment. Otherwise it stores
// nothing and reports false; the caller then queues the append with
// AppendAsync. It saves the hand-off to the appender and
// back for a lone request, which is most of the cost of a small send when
// a producer has one message in flight; a server's event loop may call it.
// msgs are copied into the log before it returns.
func (s *Store) tryAppendNow(msgs [][]byte) ([]Result, bool) {
	if !s.AppendsNow() {
		return nil, false
	}
	results := make([]Result, len(msgs))
	views := make([]protocol.View, len(msgs))
	for i, m := range msgs {
		v, err := protocol.ParseMessage(m)
		if err == nil {
			err = s.opts.Limits.CheckView(&v)
		}
		if err != nil {
			results[i].Err = asProtocolError(err)
			continue
		}
		views[i] = v
	}
	if !s.tryAppendViewsNow(views, results) {
		return nil, false
	}
	for i := range results {
		if results[i].Err != nil && views[i].Raw == nil {
			s.stats.rejected.Add(1)
		}
	}
	return results, true
}

// tryAppendViewsNow is tryAppendNow for messages its caller has parsed
// (protocol.ParseMessage) and checked against the store's Limits
// (Limits.CheckView), as a broker does before it looks for duplicates: it
// saves the second parse and CRC, and allocates nothing. results must have
// one element per view; a view whose result already holds an error is
// skipped and its result left as it is, the others' results are set. It
// reports false, storing nothing and leaving results as they were, when
// the append cannot be made at once (see tryAppendNow). The views' bytes
// are copied into the log before it returns.
func (s *Store) tryAppendViewsNow(views []protocol.View, results []Result) bool {
	if !s.TryWriteViewsNow(views, results) {
		return false
	}
	s.PublishWritten()
	return true
}

// TryWriteViewsNow is tryAppendViewsNow in two steps, for a server that
// answers before it indexes: when it reports true the views' records are
// in the message log and results are set, as tryAppendViewsNow sets them,
// but the messages are not yet readable, and the store's writer stays
// held (no other append runs, Close waits) until PublishWritten, which the
// caller must then call exactly once, soon. Under FlushAsync a record
// written to the log is as stored as a published one: a process crash
// keeps it (recovery indexes it again from the log), so the caller may
// report the messages stored before it publishes them. When it reports
// false nothing was stored and PublishWritten must not be called.
func (s *Store) TryWriteViewsNow(views []protocol.View, results []Result) bool {
	if len(results) != len(views) {
		panic("store: TryWriteViewsNow needs one result per view")
	}
	if !s.AppendsNow() || !s.closeMu.TryRLock() {
		return false
	}
	if s.closed || !s.direct.mu.TryLock() {
		s.closeMu.RUnlock()
		return false
	}
	d := &s.direct
	r := &d.req
	if d.queued.Load() != 0 || s.writeFailed.Load() || !s.prepareNow(r, views, results) || !s.fitsInSegment(r.bytes) {
		r.release()
		d.mu.Unlock()
		s.closeMu.RUnlock()
		return false
	}
	if r.valid > 0 {
		g := groupPool.Get().(*commitGroup)
		g.reqs = append(g.reqs[:0], r)
		if s.writeGroup(g) {
			d.written = g
		}
	}
	return true
}

// PublishWritten ends what TryWriteViewsNow began: it indexes the written
// messages, makes them readable, wakes their readers and releases the
// writer.
func (s *Store) PublishWritten() {
	d := &s.direct
	if g := d.written; g != nil {
		d.written = nil
		s.indexGroup(g)
		s.publish(g)
	}
	d.req.release()
	d.mu.Unlock()
	s.closeMu.RUnlock()
}

// AppendsNow reports whether tryAppendNow or tryAppendViewsNow could
// append at once now (FlushAsync, nothing queued, not a replica): a hint
// for callers that prepare differently for them; they may still refuse.
func (s *Store) AppendsNow() bool {
	return s.opts.Flush == FlushAsync && s.direct.queued.Load() == 0 && s.errIfReplica() == nil
}

// prepareNow fills r (direct.req, reused) for views whose subjects the
// store already has (found without a lock, lookupSubject); it reports
// false, leaving results alone, when a subject is new (creating it writes
// files). direct.mu must be held.
func (s *Store) prepareNow(r *appendReq, views []protocol.View, results []Result) bool {
	r.msgs, r.metas, r.results = r.msgs[:0], r.metas[:0], results
	r.valid, r.bytes, r.done = 0, 0, noDone
	var prev *subject
	for i := range views {
		v := &views[i]
		r.msgs = append(r.msgs, v.Raw)
		r.metas = append(r.metas, msgMeta{})
		if results[i].Err != nil {
			continue
		}
		sj := prev
		if sj == nil || string(v.Subject) != sj.name {
			if sj = s.lookupSubject(v.Subject); sj == nil {
				return false
			}
		}
		prev = sj
		meta := &r.metas[i]
		meta.subject, meta.subj, meta.deliverAt = v.Subject, sj, v.DeliverAtMillis
		v.Tags(func(t []byte) bool { meta.bloom |= tagBloom(t); return true })
		if s.index != nil {
			meta.idHash, meta.keyHash, meta.hasKey = indexHashes(v)
		}
		r.valid++
		r.bytes += len(v.Raw) + recordOverhead
	}
	for i := range results {
		if results[i].Err == nil {
			results[i] = Result{}
		}
	}
	return true
}

// release drops a reused request's references to its caller's memory.
func (r *appendReq) release() {
	clear(r.msgs)
	clear(r.metas)
	r.msgs, r.metas, r.results = r.msgs[:0], r.metas[:0], nil
}

// asProtocolError gives a rejected message's error a status.
func asProtocolError(err error) error {
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		return protocol.Errorf(protocol.StatusInvalid, err.Error())
	}
	return err
}

// fitsInSegment reports whether n more bytes of records fit in the message
// log's last segment, so that writing them creates no segment file.
func (s *Store) fitsInSegment(n int) bool { return int64(n) <= s.msgLog.Room() }

package store

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/segment"
)

// directAppend is the writer's state that appendLoop shares with
// TryWriteViewsNow. Whoever holds mu writes the message log: appendLoop
// while it appends and publishes (or hands to syncLoop) a group,
// TryWriteViewsNow while it appends one request on its caller's goroutine
// (until Written.Publish).
type directAppend struct {
	mu sync.Mutex
	// queued counts requests given to appendLoop and not yet through it;
	// TryWriteViewsNow appends only when it is zero, so it never overtakes a
	// queued request (a connection's requests stay in order).
	queued atomic.Int64
	batch  *segment.Batch
	head   [recordHeadSize]byte
	// crcs derives each record's CRC from its message's own (checked)
	// CRC (messagelog.go).
	crcs segment.CRCCombiner
	// req is the request TryWriteViewsNow appends, reused (mu held).
	req appendReq
	// written is the group TryWriteViewsNow wrote and Written.Publish
	// publishes (mu held), nil when nothing was written.
	written *commitGroup
}

// noDone is the callback of a request that tryAppendNow appends: it
// returns the results instead.
func noDone([]Result) {}

// tryAppendNow is tryAppendViewsNow for encoded messages, checked here
// (Views); rejected ones count in Stats.Rejected. It returns the results
// (as AppendAsync's callback would get them), or false when it stored
// nothing and the caller must queue the append.
func (s *Store) tryAppendNow(msgs [][]byte) ([]Result, bool) {
	if !s.appendsNow() {
		return nil, false
	}
	views, results := Views(msgs, s.opts.Limits)
	if !s.tryAppendViewsNow(views, results) {
		return nil, false
	}
	for i := range results {
		if views[i].Raw == nil {
			s.stats.rejected.Add(1)
		}
	}
	return results, true
}

// tryAppendViewsNow is TryWriteViewsNow followed at once by the Publish of
// what it wrote.
func (s *Store) tryAppendViewsNow(views []protocol.View, results []Result) bool {
	w, ok := s.TryWriteViewsNow(views, results)
	if ok {
		w.Publish()
	}
	return ok
}

// Written is what TryWriteViewsNow wrote and has not published yet; its
// Publish must be called exactly once, soon.
type Written struct{ s *Store }

// TryWriteViewsNow is the store's one try-now append: it writes views
// (parsed and checked as for AppendAsync) on the caller's goroutine when it
// can do so without waiting and without slow file operations: under
// FlushAsync (a durable append waits for a sync, so FlushSync always
// queues), with no other append queued or running, every subject already
// known, and the records fitting in the current message-log segment. It
// saves the hand-off to the appender and back for a lone request, which is
// most of the cost of a small send when a producer has one message in
// flight; a server's event loop may call it, and it allocates nothing.
//
// results must have one element per view; a view whose result already
// holds an error is skipped and its result left as it is. When it reports
// true the others' results are set as AppendAsync's callback would get
// them and the records are in the message log, but the messages are not
// yet readable and the store's writer stays held (no other append runs,
// Close waits) until the returned Written's Publish, which indexes them,
// makes them readable and wakes their readers: a server can reply in
// between. Under FlushAsync a record written to the log is as stored as a
// published one (a process crash keeps it: recovery indexes it from the
// log), so the caller may report the messages stored before it publishes
// them. When it reports false nothing was stored, results are as they
// were, and the caller queues the append with AppendAsync. The views'
// bytes are copied into the log before it returns.
func (s *Store) TryWriteViewsNow(views []protocol.View, results []Result) (Written, bool) {
	if len(results) != len(views) {
		panic("store: TryWriteViewsNow needs one result per view")
	}
	if !s.appendsNow() || !s.closeMu.TryRLock() {
		return Written{}, false
	}
	if s.closed || !s.direct.mu.TryLock() {
		s.closeMu.RUnlock()
		return Written{}, false
	}
	d := &s.direct
	r := &d.req
	if d.queued.Load() != 0 || s.writeFailed.Load() || !s.prepareNow(r, views, results) || !s.fitsInSegment(r.bytes) {
		r.release()
		d.mu.Unlock()
		s.closeMu.RUnlock()
		return Written{}, false
	}
	if r.valid > 0 {
		g := groupPool.Get().(*commitGroup)
		g.reqs = append(g.reqs[:0], r)
		if s.writeGroup(g) {
			d.written = g
		}
	}
	return Written{s}, true
}

// Publish ends what TryWriteViewsNow began: it indexes the written
// messages, makes them readable, wakes their readers and releases the
// writer.
func (w Written) Publish() {
	s := w.s
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

// appendsNow reports whether TryWriteViewsNow could append at once now
// (FlushAsync, nothing queued, not a replica); it may still refuse.
func (s *Store) appendsNow() bool {
	return s.opts.Flush == FlushAsync && s.direct.queued.Load() == 0 && s.errIfReplica() == nil
}

// prepareNow fills r (direct.req, reused) for views whose subjects the
// store already has (found without a lock, lookupSubject); it reports
// false, leaving results alone, when a subject is new (creating it writes
// files). direct.mu must be held.
func (s *Store) prepareNow(r *appendReq, views []protocol.View, results []Result) bool {
	r.views, r.metas, r.results = views, r.metas[:0], results
	r.valid, r.bytes, r.done = 0, 0, noDone
	var prev *subject
	for i := range views {
		v := &views[i]
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
		s.prepareMeta(&r.metas[i], v, sj)
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
	clear(r.metas)
	r.views, r.metas, r.results = nil, r.metas[:0], nil
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

package store

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/segment"
)

// directAppend is the writer's state that appendLoop shares with
// TryAppendNow. Whoever holds mu writes the message log: appendLoop while it
// appends and publishes (or hands to syncLoop) a group, TryAppendNow while
// it appends one request on its caller's goroutine.
type directAppend struct {
	mu sync.Mutex
	// queued counts requests given to appendLoop and not yet through it;
	// TryAppendNow appends only when it is zero, so it never overtakes a
	// queued request (a connection's requests stay in order).
	queued atomic.Int64
	batch  *segment.Batch
	head   [recordHeadSize]byte
}

// noDone is the callback of a request that TryAppendNow appends: it
// returns the results instead.
func noDone([]Result) {}

// TryAppendNow appends msgs on the caller's goroutine and returns their
// results (as AppendAsync's callback would get them) when it can do so
// without waiting and without slow file operations: under FlushAsync (a
// durable append waits for a sync, so FlushSync always queues), with no
// other append queued or running, every subject already known, and the
// records fitting in the current message-log segment. Otherwise it stores
// nothing and reports false; the caller then queues the append with
// AppendAsync or TryAppendAsync. It saves the hand-off to the appender and
// back for a lone request, which is most of the cost of a small send when
// a producer has one message in flight; a server's event loop may call it.
// msgs are copied into the log before it returns.
func (s *Store) TryAppendNow(msgs [][]byte) ([]Result, bool) {
	if s.opts.Flush != FlushAsync || s.direct.queued.Load() != 0 || s.errIfReplica() != nil {
		return nil, false
	}
	r := &appendReq{msgs: msgs, done: noDone, results: make([]Result, len(msgs)), metas: make([]msgMeta, len(msgs))}
	if !s.subjectsMu.TryRLock() {
		return nil, false
	}
	var prev *subject
	newSubject := false
	for i, m := range msgs {
		v, err := protocol.ParseMessage(m)
		var sj *subject
		if err == nil {
			if prev != nil && string(v.Subject) == prev.name {
				sj = prev
			} else if sj = s.subjects[string(v.Subject)]; sj == nil {
				newSubject = true // creating it writes files
				break
			}
			known := v
			known.Subject = validSubject
			err = s.opts.Limits.CheckView(&known)
		}
		if err != nil {
			r.results[i].Err = asProtocolError(err)
			continue
		}
		meta := &r.metas[i]
		meta.subject, meta.subj, meta.deliverAt = v.Subject, sj, v.DeliverAtMillis
		prev = sj
		v.Tags(func(t []byte) bool { meta.bloom |= tagBloom(t); return true })
		r.valid++
		r.bytes += len(m) + recordOverhead
	}
	s.subjectsMu.RUnlock()
	if newSubject {
		return nil, false
	}
	if !s.closeMu.TryRLock() {
		return nil, false
	}
	defer s.closeMu.RUnlock()
	if s.closed || !s.direct.mu.TryLock() {
		return nil, false
	}
	defer s.direct.mu.Unlock()
	if s.direct.queued.Load() != 0 || s.writeFailed.Load() || !s.fitsInSegment(r.bytes) {
		return nil, false
	}
	for i := range r.results {
		if r.results[i].Err != nil {
			s.stats.rejected.Add(1)
		}
	}
	if r.valid == 0 {
		return r.results, true
	}
	g := groupPool.Get().(*commitGroup)
	g.reqs = append(g.reqs[:0], r)
	if s.appendGroup(g) {
		s.publish(g)
	}
	return r.results, true
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

package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// Result is the outcome of appending one message.
type Result struct {
	// Seq is the message's sequence in its subject's consume log.
	Seq int64
	// Offset is the message-log offset of its record.
	Offset int64
	// Err is nil when the message is stored (durably under FlushSync). It is
	// a *protocol.Error (StatusInvalid, StatusTooLarge) for a message that was
	// rejected and an error wrapping ErrIO or ErrClosed when it could not be
	// stored.
	Err error
}

type msgMeta struct {
	subj  *subject
	bloom uint64
	// The message index's hashes of its id and key (msgindex.go,
	// indexHashes), set when the store keeps an index.
	idHash, keyHash uint64
	hasKey          bool
}

type appendReq struct {
	views   []protocol.View
	metas   []msgMeta
	results []Result
	valid   int
	bytes   int
	done    func([]Result)
}

// commitGroup is what one group commit wrote: its requests, the subjects it
// touched with their next sequence, and where it ended in the message log.
type commitGroup struct {
	reqs    []*appendReq
	touched []*subject
	nexts   []int64
	sizes   []int64 // bytes appended per touched subject
	ts      int64   // the group's append time
	end     int64
	seq     uint64 // its place in the order of written groups (groupCommit)
	err     error
}

var groupPool = sync.Pool{New: func() any { return new(commitGroup) }}

// Views parses and checks msgs for AppendAsync or TryWriteViewsNow
// (protocol.ParseMessage with its CRC, then l.CheckView): one view and one
// result per message; a rejected message's result holds a *protocol.Error
// (StatusInvalid, StatusTooLarge) and its view is zero. The views point
// into msgs.
func Views(msgs [][]byte, l protocol.Limits) ([]protocol.View, []Result) {
	views, results := make([]protocol.View, len(msgs)), make([]Result, len(msgs))
	checkInto(views, results, msgs, l)
	return views, results
}

// checkInto is Views into views and results (len(msgs) each): it sets
// every element of both.
func checkInto(views []protocol.View, results []Result, msgs [][]byte, l protocol.Limits) {
	for i, m := range msgs {
		v, err := protocol.ParseMessage(m)
		if err == nil {
			err = l.CheckView(&v)
		}
		if err != nil {
			views[i], results[i] = protocol.View{}, Result{Err: asProtocolError(err)}
			continue
		}
		views[i], results[i] = v, Result{}
	}
}

// viewsPool holds Append's views, given back once its append is done.
var viewsPool = sync.Pool{New: func() any { return new([]protocol.View) }}

// Append stores msgs (encoded protocol messages, checked here against
// Options.Limits: Views) and returns one Result per message once they are
// durable (FlushSync) or written (FlushAsync). Invalid messages fail alone
// and count in Stats.Rejected. The error is ctx's when ctx ends first (the
// messages may still be stored), ErrClosed or ErrReplica.
func (s *Store) Append(ctx context.Context, msgs [][]byte) ([]Result, error) {
	vp := viewsPool.Get().(*[]protocol.View)
	views := *vp
	if cap(views) < len(msgs) {
		views = make([]protocol.View, len(msgs))
	}
	views = views[:len(msgs)] // checkInto sets every view
	results := make([]Result, len(msgs))
	checkInto(views, results, msgs, s.opts.Limits)
	ch := make(chan []Result, 1)
	if err := s.AppendAsync(views, results, func(r []Result) { ch <- r }); err != nil {
		return nil, err
	}
	for i := range views {
		if views[i].Raw == nil {
			s.stats.rejected.Add(1)
		}
	}
	select {
	case r := <-ch:
		clear(views)
		*vp = views[:0]
		viewsPool.Put(vp)
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err() // the store may still hold the views
	}
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

// reqPool holds appendReqs (with their metas) between appends.
var reqPool = sync.Pool{New: func() any { return new(appendReq) }}

// putReq gives a request whose done has run back to reqPool (not
// TryWriteViewsNow's, which the store keeps).
func (s *Store) putReq(r *appendReq) {
	if r == &s.direct.req {
		return
	}
	r.views, r.results, r.done = nil, nil, nil
	reqPool.Put(r)
}

// AppendOption changes how AppendAsync takes a batch.
type AppendOption uint8

// NoWait: when the append queue is full AppendAsync queues nothing, does
// not call done and returns ErrWouldBlock, so a caller that must not block
// (a server's event loop) can hand the append to a goroutine.
const NoWait AppendOption = 1

// AppendAsync queues parsed and checked messages (views: parsed with
// protocol.ParseMessage and checked with Options.Limits' CheckView, as a
// broker's send handler does, or by Views), the store's one asynchronous
// append; done receives results, one per view, in order, once the messages
// are durable (FlushSync) or written (FlushAsync). A view whose result
// already holds an error is skipped and its result left as it is. The store
// does not check a known subject's messages again; a message for a subject
// it does not have yet is checked against its Limits (the subject's rules)
// before the subject is created. done runs on the store's commit goroutine:
// it must not block (and so must not call Append); when no message is left
// to store it runs before AppendAsync returns, on the caller's goroutine.
// views, their bytes and results must not change until done runs. The error
// is ErrClosed or ErrReplica (done is then not called), or ErrWouldBlock
// with NoWait.
func (s *Store) AppendAsync(views []protocol.View, results []Result, done func([]Result), opts ...AppendOption) error {
	if len(results) != len(views) {
		panic("store: AppendAsync needs one result per view")
	}
	var o AppendOption
	for _, x := range opts {
		o |= x
	}
	if err := s.errIfReplica(); err != nil {
		return err
	}
	r := reqPool.Get().(*appendReq)
	r.views, r.results, r.done = views, results, done
	r.metas, r.valid, r.bytes = resize(r.metas, len(views)), 0, 0
	var prev *subject
	for i := range views {
		if results[i].Err != nil {
			continue
		}
		v := &views[i]
		sj := prev
		if sj == nil || string(v.Subject) != sj.name {
			sj = s.lookupSubject(v.Subject)
		}
		if sj == nil {
			// A new subject: its name must pass the store's rules before
			// appendLoop creates it.
			if err := s.opts.Limits.CheckView(v); err != nil {
				results[i].Err = asProtocolError(err)
				s.stats.rejected.Add(1)
				continue
			}
		}
		prev = sj
		s.prepareMeta(&r.metas[i], v, sj)
		r.valid++
		r.bytes += len(v.Raw) + recordOverhead
	}
	if r.valid == 0 {
		s.putReq(r)
		done(results)
		return nil
	}
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		s.putReq(r)
		return ErrClosed
	}
	s.direct.queued.Add(1)
	if o&NoWait != 0 {
		select {
		case s.appendCh <- r:
			return nil
		default:
			s.direct.queued.Add(-1)
			s.putReq(r)
			return ErrWouldBlock
		}
	}
	s.appendCh <- r
	return nil
}

// prepareMeta fills what the appender needs of a message beside its view,
// on the caller's goroutine: its subject (nil when new), its tags' bloom
// and its index hashes.
func (s *Store) prepareMeta(meta *msgMeta, v *protocol.View, sj *subject) {
	meta.subj = sj
	v.Tags(func(t []byte) bool { meta.bloom |= tagBloom(t); return true })
	if s.index != nil {
		meta.idHash, meta.keyHash, meta.hasKey = indexHashes(v)
	}
}

// appendLoop is the message log's writer (with tryAppendNow, under
// direct.mu): it takes every request that has arrived (up to
// MaxBatchBytes), assigns sequences, writes the records with one write, and
// hands the group to syncLoop (FlushSync) or publishes it (FlushAsync).
func (s *Store) appendLoop() {
	defer s.wg.Done()
	defer s.commits.close()
	for {
		first, ok := <-s.appendCh
		if !ok {
			return
		}
		g := groupPool.Get().(*commitGroup)
		g.reqs = append(g.reqs[:0], first)
		size := first.bytes
	drain:
		for size < s.opts.MaxBatchBytes {
			select {
			case r, ok := <-s.appendCh:
				if !ok {
					break drain
				}
				g.reqs = append(g.reqs, r)
				size += r.bytes
			default:
				break drain
			}
		}
		n := int64(len(g.reqs))
		s.direct.mu.Lock()
		if s.writeFailed.Load() {
			if err := s.recoverWrites(); err != nil {
				s.failGroup(g, err)
				s.direct.queued.Add(-n)
				s.direct.mu.Unlock()
				continue
			}
		}
		if s.appendGroup(g) {
			if s.opts.Flush == FlushAsync {
				s.publish(g)
			} else {
				s.inflight.Add(1)
				s.commits.add(g)
				// A slave copies written bytes before they are durable
				// (ReadMessageTailInto): tell a waiting sync request.
				s.signalCommit()
			}
		}
		s.direct.queued.Add(-n)
		s.direct.mu.Unlock()
	}
}

// appendGroup assigns g's messages their sequences, writes their records
// with one write and indexes them (visible once published). It reports
// false when the write failed: g has then failed and its sequences are
// given back. direct.mu must be held.
func (s *Store) appendGroup(g *commitGroup) bool {
	if !s.writeGroup(g) {
		return false
	}
	s.indexGroup(g)
	return true
}

// writeGroup is appendGroup's first half: it assigns g's messages their
// sequences and writes their records with one write, reporting false (g
// failed, its sequences given back) when the write failed. direct.mu must
// be held, and is until indexGroup.
func (s *Store) writeGroup(g *commitGroup) bool {
	if s.direct.batch == nil {
		s.direct.batch = s.msgLog.NewBatch()
	}
	batch, head := s.direct.batch, s.direct.head[:]
	batch.Reset()
	now := max(s.opts.Clock().UnixMilli(), s.lastTs)
	s.lastTs = now
	g.touched, g.nexts, g.sizes = g.touched[:0], g.nexts[:0], g.sizes[:0]
	for _, r := range g.reqs {
		for i := range r.views {
			if r.results[i].Err != nil {
				continue
			}
			m := r.views[i].Raw
			meta := &r.metas[i]
			sj := meta.subj
			if sj == nil {
				var err error
				if sj, err = s.subjectFor(string(r.views[i].Subject), true); err != nil {
					r.results[i].Err = fmt.Errorf("%w: %w", ErrIO, err)
					continue
				}
				meta.subj = sj
			}
			putRecordHead(head, sj.next, now)
			// The message's CRC (checked by the caller) covers all of it
			// but its first 4 bytes: the record's CRC is derived from it.
			off, err := batch.AppendSummed(recordMessage, head, m, len(m)-4, binary.BigEndian.Uint32(m), &s.direct.crcs)
			if err != nil {
				r.results[i].Err = protocol.Errorf(protocol.StatusTooLarge, err.Error())
				continue
			}
			r.results[i].Seq, r.results[i].Offset = sj.next, off
			if sj.touched != g {
				sj.touched = g
				sj.touchedIdx = int32(len(g.touched))
				g.touched = append(g.touched, sj)
				g.nexts = append(g.nexts, sj.next)
				g.sizes = append(g.sizes, 0)
			}
			g.sizes[sj.touchedIdx] += int64(recordOverhead + len(m))
			sj.next++
		}
	}
	var err error
	if batch.Records() > 0 {
		err = s.msgLog.Write(batch)
	}
	if err != nil {
		// Nothing of this group is stored: give its sequences back.
		for i, sj := range g.touched {
			sj.rollback(g.nexts[i])
			sj.touched = nil
		}
		s.writeFailed.Store(true)
		s.lg.Error("message log write failed", zap.Error(err))
		s.failGroup(g, fmt.Errorf("%w: %w", ErrIO, err))
		return false
	}
	g.end = batch.End()
	g.ts = now
	return true
}

// indexGroup is appendGroup's second half: it adds the consume-log entries
// of g's written messages, visible only once published. Runs of one
// subject take its lock once. direct.mu must be held.
func (s *Store) indexGroup(g *commitGroup) {
	now := g.ts
	var run *subject
	for _, r := range g.reqs {
		for i := range r.views {
			res := &r.results[i]
			if res.Err != nil {
				continue
			}
			meta := &r.metas[i]
			if meta.subj != run {
				if run != nil {
					s.endEntries(run)
				}
				run = meta.subj
				run.mu.Lock()
			}
			v := &r.views[i]
			e := entry{offset: res.Offset, size: uint32(recordOverhead + len(v.Raw)), timestamp: now, deliverAt: v.DeliverAtMillis, bloom: meta.bloom}
			run.addEntryLocked(&e)
		}
	}
	if run != nil {
		s.endEntries(run)
	}
	for i, sj := range g.touched {
		sj.touched = nil
		g.nexts[i] = sj.next
	}
}

// endEntries ends a run of addEntryLocked calls: it flushes a full buffer
// and unlocks the subject.
func (s *Store) endEntries(sj *subject) {
	var err error
	if len(sj.pending) >= pendingFlushBytes {
		err = sj.flushLocked()
	}
	sj.mu.Unlock()
	if err != nil {
		s.lg.Warn("consume log write failed; entries stay buffered", zap.String("subject", sj.name), zap.Error(err))
	}
}

// publish makes a stored group readable, completes its requests and wakes
// the subjects' waiters.
func (s *Store) publish(g *commitGroup) {
	for i, sj := range g.touched {
		sj.setVisible(g.nexts[i], g.sizes[i])
	}
	if s.index != nil {
		s.index.feedGroup(s.goodEnd.Load(), g)
	}
	s.goodEnd.Store(g.end)
	s.lastPublishedTs.Store(g.ts)
	n := 0
	for _, r := range g.reqs {
		n += r.valid
	}
	s.stats.appended.Add(int64(n)) // before the callbacks: a caller may read Stats at once
	for _, r := range g.reqs {
		r.done(r.results)
	}
	s.signalCommit()
	if s.opts.OnAppend != nil {
		for i, sj := range g.touched {
			if sj.watched.Load() {
				s.opts.OnAppend(sj.name, g.nexts[i])
			}
		}
	}
	s.putGroup(g)
}

func (s *Store) failGroup(g *commitGroup, err error) {
	for _, r := range g.reqs {
		for i := range r.results {
			if r.results[i].Err == nil {
				r.results[i] = Result{Err: err}
			}
		}
		r.done(r.results)
	}
	s.stats.failedAppends.Add(1)
	s.putGroup(g)
}

func (s *Store) putGroup(g *commitGroup) {
	for _, r := range g.reqs {
		s.putReq(r)
	}
	clear(g.reqs)
	g.reqs = g.reqs[:0]
	clear(g.touched)
	g.touched = g.touched[:0]
	g.nexts = g.nexts[:0]
	g.sizes = g.sizes[:0]
	groupPool.Put(g)
}

// recoverWrites runs on the appender after a failed write or sync: it waits
// until every group in flight has failed, cuts the message log back to the
// end of the last published group, forgets the sequences of everything
// after it, and clears the failure so appends are tried again. A cut of
// written bytes is recorded first (noteCut): a master may have served them
// to its slave as a tentative tail, and the next records land at the same
// offsets.
func (s *Store) recoverWrites() error {
	s.inflight.Wait()
	good := s.goodEnd.Load()
	if s.msgLog.End() > good {
		s.noteCut(good)
	}
	if err := s.msgLog.Reset(good); err != nil {
		return fmt.Errorf("%w: reopen message log: %w", ErrIO, err)
	}
	s.subjectsMu.RLock()
	defer s.subjectsMu.RUnlock()
	for _, sj := range s.subjects {
		_, visible := sj.bounds()
		if sj.next != visible {
			if err := sj.rollback(visible); err != nil {
				return fmt.Errorf("%w: roll back consume log of %s: %w", ErrIO, sj.name, err)
			}
		}
	}
	s.commits.reset()
	s.writeFailed.Store(false)
	s.lg.Info("message log writes resumed", zap.Int64("offset", good))
	return nil
}

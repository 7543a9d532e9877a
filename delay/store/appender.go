package store

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/segment"
)

// Group commit. Append validates in the caller's goroutine and queues a
// request; writeLoop takes every request that has arrived (up to
// maxGroupBytes), writes their records (segment.Log.Write: one pwrite per
// segment), and hands the group to syncLoop; while syncLoop runs
// fdatasync, writeLoop already writes the next group, and the next
// fdatasync covers every group written meanwhile. Under FlushAsync writeLoop completes requests after the
// write and syncLoop runs on a ticker.

// maxGroupBytes bounds the message bytes one write group takes.
const maxGroupBytes = 8 << 20

type appendReq struct {
	msgs    [][]byte // valid messages to write
	index   []int    // their positions in results
	bytes   int
	results []Result
	done    func([]Result)
}

// complete sets err (nil: stored) for every queued message and calls done.
func (r *appendReq) complete(err error) {
	if err != nil {
		for _, i := range r.index {
			r.results[i].Err = err
		}
	}
	r.done(r.results)
}

// syncJob is what writeLoop has written and syncLoop has not synced yet.
type syncJob struct {
	written bool  // something was written since the last sync
	end     int64 // message-log end covered by this job
	waiters []*appendReq
}

func (s *Store) fail(err error) {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.writeErr == nil {
		s.writeErr = err
		s.lg.Error("message log failed; appends are refused until reopened", zap.Error(err))
	}
}

// refusal returns why Append refuses messages now: a failed message-log
// write or sync (until the store is reopened), or schedule files that
// cannot be written (until the stalled replay catches up). nil: messages
// are taken.
func (s *Store) refusal() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.writeErr != nil {
		return s.writeErr
	}
	if s.indexErr != nil {
		return fmt.Errorf("schedule files cannot be written: %w", s.indexErr)
	}
	return nil
}

// setRollErr records whether the last group that needed a new segment
// could make one (err nil).
func (s *Store) setRollErr(err error) {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	switch {
	case err != nil && s.rollErr == nil:
		s.lg.Error("cannot start a new message-log segment; appends that need one fail until one can be made", zap.Error(err))
	case err == nil && s.rollErr != nil:
		s.lg.Info("a new message-log segment was made; appends are taken again")
	}
	s.rollErr = err
}

// rollFailure returns why the last group that needed a new segment could
// not make one (nil: it could, or none needed one since).
func (s *Store) rollFailure() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.rollErr
}

func storeError(err error) error {
	return fmt.Errorf("%w: %w", protocol.ErrStoreError, err)
}

func (s *Store) writeLoop() {
	defer s.appendWG.Done()
	defer close(s.writerDone)
	group := make([]*appendReq, 0, 64)
	for req := range s.appendCh {
		group = append(group[:0], req)
		size := req.bytes
	drain:
		for size < maxGroupBytes {
			select {
			case r, ok := <-s.appendCh:
				if !ok {
					break drain
				}
				group = append(group, r)
				size += r.bytes
			default:
				break drain
			}
		}
		s.writeGroup(group)
		for i := range group {
			group[i] = nil
		}
	}
}

// writeGroup writes the records of group and hands it to syncLoop.
func (s *Store) writeGroup(group []*appendReq) {
	if err := s.refusal(); err != nil {
		for _, r := range group {
			r.complete(storeError(err))
		}
		return
	}
	head := appendTime(s.head[:], s.clock.Now().UnixMilli())
	b := s.batch
	b.Reset()
	groupStart := s.log.End()
	segs := 0
	if s.rollFailure() != nil {
		segs = len(s.log.Segments())
	}
	var err error
fill:
	for _, r := range group {
		for _, m := range r.msgs {
			if _, err = b.Append(logKindMessage, head, m); err != nil {
				break fill
			}
		}
	}
	if err == nil {
		err = s.log.Write(b)
	}
	if b.Bytes() > 2*maxGroupBytes {
		s.batch = s.log.NewBatch() // do not keep an outsized buffer
	}
	if err != nil {
		err = fmt.Errorf("write message log: %w", err)
		// A group that cannot start a new segment (a full disk) fails
		// alone: Reset takes back what it wrote into the old segment (a
		// restart must not find it) and clears the log's poison, and the
		// next group tries a new segment again.
		if errors.Is(err, segment.ErrNewSegment) && s.takeBack(groupStart) {
			s.setRollErr(err)
		} else {
			s.fail(err)
		}
		signal(s.takenBack) // a sync that met the poison tries again
		for _, r := range group {
			r.complete(storeError(err))
		}
		return
	}
	if segs > 0 && len(s.log.Segments()) != segs {
		s.setRollErr(nil)
	}
	end := s.log.End()
	s.syncMu.Lock()
	s.pending.written, s.pending.end = true, end
	if s.opts.Flush == FlushSync {
		s.pending.waiters = append(s.pending.waiters, group...)
	}
	s.syncMu.Unlock()
	s.written.Store(end)
	n := 0
	for _, r := range group {
		n += len(r.msgs)
	}
	s.counters.appended.Add(uint64(n))
	if s.opts.Flush == FlushAsync {
		for _, r := range group {
			r.complete(nil)
		}
		signal(s.indexWake)
		return
	}
	signal(s.syncWake)
}

// takeBack cuts the message log back to end after a group failed to start
// a new segment. It reports false when the log could not be cut.
func (s *Store) takeBack(end int64) bool {
	if err := s.log.Reset(end); err != nil {
		s.lg.Error("cannot take back a failed group's records", zap.Error(err))
		return false
	}
	return true
}

func (s *Store) syncLoop() {
	defer s.appendWG.Done()
	var tick <-chan time.Time
	if s.opts.Flush == FlushAsync {
		t := time.NewTicker(s.opts.FlushInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-s.syncWake:
			s.syncOnce()
		case <-tick:
			s.syncOnce()
		case <-s.writerDone:
			s.syncOnce()
			return
		}
	}
}

// syncOnce fdatasyncs what writeLoop handed over and completes its waiters.
func (s *Store) syncOnce() {
	s.syncMu.Lock()
	job := s.pending
	s.pending = syncJob{}
	s.syncMu.Unlock()
	if !job.written {
		return
	}
	err := s.log.Sync()
	for errors.Is(err, segment.ErrNewSegment) && s.refusal() == nil {
		// The writer could not start a new segment: the failed write
		// poisoned the log until writeGroup's Reset takes that group
		// back. The groups of this job were written before it and are
		// whole: sync again once the poison is cleared.
		<-s.takenBack
		err = s.log.Sync()
	}
	if err != nil {
		err = fmt.Errorf("sync message log: %w", err)
		s.fail(err)
		for _, r := range job.waiters {
			r.complete(storeError(err))
		}
		return
	}
	if job.end > s.durable.Load() {
		s.durable.Store(job.end)
		signal(s.indexWake)
	}
	for _, r := range job.waiters {
		r.complete(nil)
	}
}

package store

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// Group commit. Append validates in the caller's goroutine and queues a
// request; writeLoop takes every request that has arrived (up to
// maxGroupBytes), writes their records with one pwrite per segment, and
// hands the group to syncLoop; while syncLoop runs fdatasync, writeLoop
// already writes the next group, and the next fdatasync covers every group
// written meanwhile. Under FlushAsync writeLoop completes requests after the
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
	active     *os.File   // segment written last
	retired    []*os.File // segments rolled away from: sync, then close
	newSegment bool       // a segment was created: sync the directory
	end        int64      // message-log end covered by this job
	waiters    []*appendReq
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

// unwrite takes back what a failed group wrote into the active segment
// before it failed to start the next one: it zeroes the bytes from
// groupStart (a zero length ends a segment's records, as in the
// preallocated space past them) and moves the write position back there.
// It reports false when the bytes could not be zeroed.
func (s *Store) unwrite(groupStart int64) bool {
	w := &s.wal
	if w.pos > groupStart {
		if _, err := w.f.WriteAt(make([]byte, w.pos-groupStart), groupStart); err != nil {
			s.lg.Error("cannot take back a failed group's records", zap.Error(err))
			return false
		}
	}
	w.pos = groupStart
	return true
}

func storeError(err error) error {
	return fmt.Errorf("%w: %w", protocol.ErrStoreError, err)
}

func (s *Store) writeLoop() {
	defer s.appendWG.Done()
	defer close(s.writerDone)
	var buf []byte
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
		buf = s.writeGroup(group, buf)
		for i := range group {
			group[i] = nil
		}
	}
}

// writeGroup writes the records of group and hands it to syncLoop. It
// returns buf for reuse.
func (s *Store) writeGroup(group []*appendReq, buf []byte) []byte {
	if err := s.refusal(); err != nil {
		for _, r := range group {
			r.complete(storeError(err))
		}
		return buf
	}
	now := s.clock.Now().UnixMilli()
	w := &s.wal
	var retired []*os.File
	groupStart := w.pos // in the active segment
	rollFailed := false
	write := func() error {
		b := buf[:0]
		for _, r := range group {
			for _, m := range r.msgs {
				need := int64(walHeaderSize + len(m))
				if w.pos+int64(len(b))+need > w.alloc && w.pos+int64(len(b)) > 0 {
					if _, err := w.f.WriteAt(b, w.pos); err != nil {
						return err
					}
					w.pos += int64(len(b))
					b = b[:0]
					old, err := w.roll(need)
					if err != nil {
						rollFailed = true
						return err
					}
					retired = append(retired, old)
				}
				b = appendWALRecord(b, now, m)
			}
		}
		if _, err := w.f.WriteAt(b, w.pos); err != nil {
			return err
		}
		w.pos += int64(len(b))
		if cap(b) <= 2*maxGroupBytes {
			buf = b
		}
		return nil
	}
	err := write()
	if err != nil {
		err = fmt.Errorf("write message log: %w", err)
		if rollFailed && len(retired) == 0 && s.unwrite(groupStart) {
			// Nothing of the group is left in the log: only this group
			// fails, and the next tries a new segment again.
			s.setRollErr(err)
		} else {
			s.fail(err)
		}
	} else if len(retired) > 0 {
		s.setRollErr(nil)
	}
	s.syncMu.Lock()
	s.pending.retired = append(s.pending.retired, retired...)
	s.pending.newSegment = s.pending.newSegment || len(retired) > 0
	if err == nil {
		s.pending.active = w.f
		s.pending.end = w.end()
		if s.opts.Flush == FlushSync {
			s.pending.waiters = append(s.pending.waiters, group...)
		}
	}
	s.syncMu.Unlock()
	if err != nil {
		for _, r := range group {
			r.complete(storeError(err))
		}
		return buf
	}
	s.written.Store(w.end())
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
		return buf
	}
	signal(s.syncWake)
	return buf
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
	var err error
	for _, f := range job.retired {
		if e := fdatasync(f); e != nil && err == nil {
			err = e
		}
		f.Close()
	}
	if job.active != nil {
		if e := fdatasync(job.active); e != nil && err == nil {
			err = e
		}
	}
	if job.newSegment && err == nil {
		err = fsutil.SyncDir(filepath.Join(s.dir, walDir))
	}
	if err != nil {
		err = fmt.Errorf("sync message log: %w", err)
		s.fail(err)
		for _, r := range job.waiters {
			r.complete(storeError(err))
		}
		return
	}
	if job.active != nil && job.end > s.durable.Load() {
		s.durable.Store(job.end)
		signal(s.indexWake)
	}
	for _, r := range job.waiters {
		r.complete(nil)
	}
}

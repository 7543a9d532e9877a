package store

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// replayLimit is how far the replay may read: what is durable, or under
// FlushAsync what is written.
func (s *Store) replayLimit() int64 {
	if s.opts.Flush == FlushAsync {
		return s.written.Load()
	}
	return s.durable.Load()
}

// replayBatchRecords bounds one replay batch.
const (
	replayBatchRecords = 8192
	replayBatchBytes   = 4 << 20
)

type hourBuf struct {
	st    *hourState
	base  int64
	buf   []byte
	count int64
}

type wheelAdd struct {
	due int64
	e   entry
}

// replay appends message-log records up to the limit to their schedule
// files, adding those due within their hour's load mark straight to the
// wheel.
func (s *Store) replay() {
	if s.replayErr != nil {
		return
	}
	if s.indexFailure() != nil && s.clock.Now().Before(s.replayRetryAt) {
		return
	}
	limit := s.replayLimit()
	bufs := make(map[int64]*hourBuf)
	var adds []wheelAdd
	var cancels [][2]int64 // hour, offset
	var index []indexed
	for s.reader.Pos() < limit {
		start := s.reader.Pos()
		clear(bufs)
		adds = adds[:0]
		cancels = cancels[:0]
		index = index[:0]
		n, size := 0, 0
		var tooBig error
		maxBytes := replayBatchBytes
		if s.indexFailure() != nil {
			maxBytes = stalledBatchBytes
		}
		for n < replayBatchRecords && size < maxBytes {
			rec, ok, err := nextRecord(s.reader, limit)
			if err != nil {
				s.replayErr = fmt.Errorf("%w: replay message log: %w", ErrCorrupt, err)
				s.lg.Error("replay stopped", zap.Error(s.replayErr))
				break
			}
			if !ok {
				break
			}
			msg := rec.message
			if isControl(msg) {
				if kind, h, off := parseControl(msg); kind == controlCancel || kind == controlReschedule {
					cancels = append(cancels, [2]int64{h, off})
				}
				if msg = controlMessage(msg); msg == nil {
					n++
					continue
				}
			}
			due := dueOf(msg)
			h := scheduleHour(due, rec.appendMillis)
			st := s.hourFor(h)
			if rec.offset <= st.lastWAL {
				continue // already in the file (rebuild without a checkpoint)
			}
			hb := bufs[h]
			if hb == nil {
				hb = &hourBuf{st: st, base: st.size}
				bufs[h] = hb
			}
			off := hb.base + int64(len(hb.buf))
			if !entryFits(h, off, scheduleHeaderSize+int64(len(msg))) {
				// Never expected (an hour file of 1 TiB): refuse rather
				// than schedule a message the wheel cannot name.
				tooBig = fmt.Errorf("schedule file %s cannot take a record of %d bytes at offset %d: an hour file holds at most %d bytes",
					hourName(h), len(msg), off, int64(maxScheduleFile))
				break
			}
			hb.buf = appendScheduleRecord(hb.buf, rec.offset, msg)
			hb.count++
			if v, err := protocol.ParseMessageNoCRC(msg); err == nil { // checked by Append; the log's CRC covers it
				index = append(index, s.idx.entryOf(packLoc(h, off), rec.offset, &v))
			}
			if due <= st.loadedTo {
				adds = append(adds, wheelAdd{due: due, e: newEntry(h, off, len(msg))})
			}
			n++
			size += len(msg)
		}
		writeErr := tooBig
		if writeErr == nil {
			// Cancel entries name records of earlier batches (Cancel waits
			// until its target is replayed).
			writeErr = s.writeCancels(cancels)
		}
		if writeErr != nil && len(bufs) == 0 {
			s.reader.SetPos(start)
			s.stallReplay(writeErr)
			return
		}
		for h, hb := range bufs {
			err := writeErr
			if err == nil {
				err = s.writeSchedule(h, hb)
			}
			if err != nil {
				// Nothing of the batch is counted: the files are cut back to
				// their hours' sizes (a partial write's bytes would hold the
				// space a full disk lacks; a restart would cut them back to
				// the checkpoint anyway), and the retry, in small batches,
				// writes it again from the same record.
				for h, hb := range bufs {
					s.cutSchedule(h, hb.base)
				}
				s.reader.SetPos(start)
				s.stallReplay(err)
				return
			}
		}
		s.mu.Lock()
		for h, hb := range bufs {
			hb.st.size += int64(len(hb.buf))
			hb.st.records += hb.count
			s.dirtyHours[h] = struct{}{}
			s.changes.log.noteLocked(h)
		}
		for _, c := range cancels {
			h, off := c[0], c[1]
			if st := s.hours[h]; st != nil && !s.cancelled.mark(h, off, cancelCounted) && st.loaded() {
				st.dispatched++ // a first load counts it from the dispatch log
			}
			s.changes.log.noteLocked(h)
		}
		s.changes.log.replayed = s.reader.Pos()
		for _, a := range adds {
			s.wheel.Add(a.due, a.e)
		}
		s.mu.Unlock()
		s.idx.add(index)
		s.replayedPos.Store(s.reader.Pos())
		s.changes.fire()
		if len(adds) > 0 {
			signal(s.fireWake)
		}
		if s.reader.Pos() != s.replayPos {
			s.replayPos = s.reader.Pos()
			s.ckptDirty = true
		}
		if s.replayErr != nil || n == 0 {
			break
		}
	}
	if s.replayErr == nil && s.reader.Pos() >= limit {
		s.unstallReplay() // caught up: full batches again
	}
	if !s.caughtUp && s.replayPos >= s.recoveredEnd {
		s.caughtUp = true
	}
}

// stalledBatchBytes bounds a replay batch after a stall until the replay
// catches up, so that it can fit in what a full disk gave back.
const stalledBatchBytes = 64 << 10

// cutSchedule cuts hour h's file back to size after a failed write.
func (s *Store) cutSchedule(h int64, size int64) {
	cf, err := s.schedules.acquire(h, false)
	if err != nil {
		return // never created
	}
	defer s.schedules.release(cf)
	if err := cf.File.Truncate(size); err != nil {
		s.lg.Warn("cannot cut a schedule file back after a failed write", zap.String("hour", hourName(h)), zap.Error(err))
	}
}

// replayRetry is how long a replay stalled by a failed schedule-file write
// (a full disk) waits before it tries again.
const replayRetry = time.Second

// stallReplay records that schedule files cannot be written: Append refuses
// messages (they could not be scheduled) until the replay, retrying every
// replayRetry in small batches, catches up.
func (s *Store) stallReplay(err error) {
	s.replayRetryAt = s.clock.Now().Add(replayRetry)
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.indexErr == nil {
		s.lg.Error("replay stalled: schedule files cannot be written; appends are refused until the replay catches up",
			zap.Error(err), zap.Duration("retry", replayRetry))
	}
	s.indexErr = err
}

// unstallReplay clears a stall once the replay caught up.
func (s *Store) unstallReplay() {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.indexErr != nil {
		s.lg.Info("replay caught up after a stall: appends are taken again", zap.NamedError("was", s.indexErr))
		s.indexErr = nil
	}
}

// indexFailure returns why the replay is stalled (nil: it is not).
func (s *Store) indexFailure() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.indexErr
}

func (s *Store) writeSchedule(h int64, hb *hourBuf) error {
	cf, err := s.schedules.acquire(h, true)
	if err != nil {
		return fmt.Errorf("open schedule file %s: %w", hourName(h), err)
	}
	defer s.schedules.release(cf)
	if _, err := cf.File.WriteAt(hb.buf, hb.base); err != nil {
		return fmt.Errorf("write schedule file %s: %w", hourName(h), err)
	}
	return nil
}

// hourFor returns hour h's state, creating it. Once the replay has caught
// up with what recovery found, a new hour that starts within the window is
// loaded up to the window's end at once (its file is empty), so its records
// due by then go straight to the wheel.
func (s *Store) hourFor(h int64) *hourState {
	if st := s.hours[h]; st != nil {
		return st
	}
	st := &hourState{lastWAL: -1, loadedTo: notLoaded}
	if !s.caughtUp {
		if info, err := os.Stat(filepath.Join(s.dir, dispatchDir, hourName(h))); err == nil {
			st.dispatched = info.Size() / dispatchEntrySize
		}
	} else if to := s.clock.Now().UnixMilli() + s.opts.Window.Milliseconds(); hourStart(h) <= to {
		st.loadedTo = min(to, hourStart(h+1)-1)
	}
	if !st.full(h) {
		i := sort.Search(len(s.unloaded), func(i int) bool { return s.unloaded[i] >= h })
		s.unloaded = append(s.unloaded, 0)
		copy(s.unloaded[i+1:], s.unloaded[i:])
		s.unloaded[i] = h
	}
	s.mu.Lock()
	s.hours[h] = st
	s.mu.Unlock()
	s.ckptDirty = true
	return st
}

package store

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"go.uber.org/zap"
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
	limit := s.replayLimit()
	bufs := make(map[int64]*hourBuf)
	var adds []wheelAdd
	for s.reader.pos < limit {
		clear(bufs)
		adds = adds[:0]
		n, size := 0, 0
		for n < replayBatchRecords && size < replayBatchBytes {
			rec, ok, err := s.reader.next(limit)
			if err != nil {
				s.replayErr = fmt.Errorf("%w: replay message log: %w", ErrCorrupt, err)
				s.lg.Error("replay stopped", zap.Error(s.replayErr))
				break
			}
			if !ok {
				break
			}
			msg := rec.message
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
			hb.buf = appendScheduleRecord(hb.buf, rec.offset, msg)
			hb.count++
			if due <= st.loadedTo {
				adds = append(adds, wheelAdd{due: due, e: entry{hour: int32(h), size: uint32(len(msg)), offset: off}})
			}
			n++
			size += len(msg)
		}
		for h, hb := range bufs {
			if err := s.writeSchedule(h, hb); err != nil {
				// The file may hold part of the batch; the next start cuts it
				// back to the checkpoint and replays again.
				s.replayErr = err
				s.lg.Error("replay stopped", zap.Error(err))
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
		s.changes.log.replayed = s.reader.pos
		for _, a := range adds {
			s.wheel.Add(a.due, a.e)
		}
		s.mu.Unlock()
		s.changes.fire()
		if len(adds) > 0 {
			signal(s.fireWake)
		}
		if s.reader.pos != s.replayPos {
			s.replayPos = s.reader.pos
			s.ckptDirty = true
		}
		if s.replayErr != nil || n == 0 {
			break
		}
	}
	if !s.caughtUp && s.replayPos >= s.recoveredEnd {
		s.caughtUp = true
	}
}

func (s *Store) writeSchedule(h int64, hb *hourBuf) error {
	cf, err := s.schedules.acquire(h, true)
	if err != nil {
		return fmt.Errorf("open schedule file %s: %w", hourName(h), err)
	}
	defer s.schedules.release(cf)
	if _, err := cf.f.WriteAt(hb.buf, hb.base); err != nil {
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

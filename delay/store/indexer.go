package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/fsutil"
)

// indexLoop replays the message log into schedule files, loads hours into
// the wheel as they come within the window, checkpoints, and applies
// retention. It is the only writer of schedule files and of the checkpoint.
func (s *Store) indexLoop() {
	defer s.wg.Done()
	timer := s.clock.NewTimer(0)
	defer timer.Stop()
	for {
		now := s.clock.Now()
		s.indexOnce(now, false)
		timer.ResetAt(now.Add(s.indexWait(now)))
		select {
		case <-s.indexWake:
		case <-timer.C():
		case reply := <-s.syncReq:
			reply <- s.indexOnce(s.clock.Now(), true)
		case <-s.quit:
			s.replay()
			if err := s.checkpoint(true); err != nil {
				s.lg.Error("final checkpoint failed", zap.Error(err))
			}
			return
		}
	}
}

// indexOnce does the indexer's work that is due; force checkpoints now.
func (s *Store) indexOnce(nowTime time.Time, force bool) error {
	s.replay()
	now := nowTime.UnixMilli()
	if s.caughtUp {
		s.loadDue(now)
	}
	var err error
	interval := s.opts.CheckpointInterval.Milliseconds()
	// A checkpoint fsyncs every schedule file written since the last one:
	// with messages spread over thousands of hours that is thousands of
	// fsyncs, so checkpoints come no more often than ten times their own
	// cost, leaving the indexer most of its time for the replay. Dispatch
	// logs are fsynced every interval regardless.
	every := max(interval, 10*s.ckptCost.Milliseconds())
	switch {
	case force || now-s.lastCkpt >= every || now < s.lastCkpt:
		s.lastCkpt, s.lastDispatchSync = now, now
		start := time.Now()
		if err = s.checkpoint(force); err != nil {
			s.lg.Error("checkpoint failed", zap.Error(err))
		}
		s.ckptCost = time.Since(start)
	case now-s.lastDispatchSync >= interval || now < s.lastDispatchSync:
		s.lastDispatchSync = now
		if err := s.dispatch.syncDirty(); err != nil {
			s.lg.Error("sync dispatch logs failed", zap.Error(err))
		}
	}
	if s.caughtUp && (now-s.lastRetain >= s.opts.RetentionInterval.Milliseconds() || now < s.lastRetain) {
		s.lastRetain = now
		s.retain(now)
	}
	if err == nil {
		err = s.replayErr
	}
	return err
}

// indexWait returns how long the indexer may sleep: until the next
// checkpoint or the next hour load, whichever comes first.
func (s *Store) indexWait(now time.Time) time.Duration {
	wait := s.opts.CheckpointInterval
	if at, ok := s.nextLoad(); ok {
		if until := time.Duration(at-now.UnixMilli()) * time.Millisecond; until < wait {
			wait = until
		}
	}
	if wait < time.Millisecond {
		wait = time.Millisecond
	}
	return wait
}

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
		}
		for _, a := range adds {
			s.wheel.Add(a.due, a.e)
		}
		s.mu.Unlock()
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

// loadStep is how far the window moves before a partly loaded hour is
// scanned again: a message is in the wheel at least Window-loadStep before
// it is due.
func (s *Store) loadStep() int64 { return max(s.opts.Window.Milliseconds()/6, 1) }

// loadDue loads into the wheel what falls due within the window: hours
// whose start comes within it are scanned, and scanned again each time the
// window has moved on by loadStep, each scan adding the messages due between
// the previous scan's end and the window's end.
func (s *Store) loadDue(now int64) {
	to := now + s.opts.Window.Milliseconds()
	step := s.loadStep()
	for i := 0; i < len(s.unloaded); {
		h := s.unloaded[i]
		if hourStart(h) > to {
			return
		}
		st := s.hours[h]
		if st.loaded() && st.loadedTo > to-step {
			i++ // scanned recently enough
			continue
		}
		if !st.loaded() && hourStart(h+1) <= now && s.inWheel() >= s.opts.MaxBacklog {
			return // a backlog hour: wait for the wheel to drain
		}
		if err := s.loadHour(h, min(to, hourStart(h+1)-1)); err != nil {
			s.lg.Error("load schedule hour failed; will retry", zap.String("hour", hourName(h)), zap.Error(err))
			return
		}
		if st.full(h) {
			s.unloaded = append(s.unloaded[:i], s.unloaded[i+1:]...)
		} else {
			i++
		}
	}
}

// nextLoad returns when loadDue next has work (Unix ms), or false.
func (s *Store) nextLoad() (int64, bool) {
	window, step := s.opts.Window.Milliseconds(), s.loadStep()
	next, ok := int64(0), false
	for _, h := range s.unloaded[:min(len(s.unloaded), 4)] {
		at := hourStart(h) - window
		if st := s.hours[h]; st.loaded() {
			at = st.loadedTo + step - window
		}
		if !ok || at < next {
			next, ok = at, true
		}
	}
	return next, ok
}

func (s *Store) inWheel() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wheel.Len()
}

// loadBatch is how many entries loadHour adds to the wheel per lock.
const loadBatch = 4096

// loadHour adds hour h's undispatched records due after its previous
// load's end and at or before to, and moves its load mark to to, so that
// later records due by then go straight to the wheel.
func (s *Store) loadHour(h int64, to int64) error {
	st := s.hours[h]
	from, first := st.loadedTo, !st.loaded()
	// The dispatch log is read on every scan: after a restart with the clock
	// set back, messages beyond the first scan may have gone out already.
	offs, err := s.dispatch.load(h)
	if err != nil {
		return err
	}
	limit := st.size
	if first && int64(len(offs)) >= st.records {
		s.mu.Lock()
		st.loadedTo, st.dispatched = to, int64(len(offs))
		s.mu.Unlock()
		return nil
	}
	cf, err := s.schedules.acquire(h, false)
	if err != nil {
		return err
	}
	defer s.schedules.release(cf)
	s.mu.Lock()
	st.loadedTo = to
	if first {
		// Exact from the file; later MarkDispatched calls count on from it.
		st.dispatched = int64(len(offs))
	}
	s.mu.Unlock()
	batch := make([]wheelAdd, 0, loadBatch)
	flush := func() {
		s.mu.Lock()
		for _, a := range batch {
			s.wheel.Add(a.due, a.e)
		}
		s.mu.Unlock()
		batch = batch[:0]
		signal(s.fireWake)
	}
	j := 0
	loaded := 0
	scan := scanSchedule(cf.f, limit, maxRecordSize, func(off int64, msg []byte) {
		due := dueOf(msg)
		if (!first && due <= from) || due > to {
			return
		}
		for j < len(offs) && offs[j] < off {
			j++
		}
		if j < len(offs) && offs[j] == off {
			return
		}
		batch = append(batch, wheelAdd{due: due, e: entry{hour: int32(h), size: uint32(len(msg)), offset: off}})
		loaded++
		if len(batch) == loadBatch {
			flush()
		}
	})
	flush()
	if scan.err != nil && first {
		s.counters.corrupt.Add(uint64(st.records - scan.records))
		s.lg.Error("schedule file has invalid records; the rest of the hour is not loaded",
			zap.String("hour", hourName(h)), zap.Int64("offset", scan.end), zap.Int64("records", st.records),
			zap.Int64("valid", scan.records), zap.Error(scan.err))
	}
	s.lg.Debug("loaded hour", zap.String("hour", hourName(h)), zap.Time("to", time.UnixMilli(to)),
		zap.Int("entries", loaded), zap.Int("dispatched", len(offs)))
	return nil
}

// checkpoint fsyncs the schedule files written since the last one and the
// dispatch logs, then records the replay position and hour sizes. It skips
// the write when nothing changed, unless force.
func (s *Store) checkpoint(force bool) error {
	if err := s.syncSchedules(); err != nil {
		return err
	}
	if err := s.dispatch.syncDirty(); err != nil {
		s.lg.Error("sync dispatch logs failed", zap.Error(err))
	}
	if !s.ckptDirty && !force && len(s.dirtyHours) == 0 {
		return nil
	}
	c := checkpoint{walOffset: s.replayPos, hours: make([]hourCheckpoint, 0, len(s.hours))}
	for h, st := range s.hours {
		c.hours = append(c.hours, hourCheckpoint{hour: h, size: st.size, records: st.records})
	}
	sort.Slice(c.hours, func(i, j int) bool { return c.hours[i].hour < c.hours[j].hour })
	if err := fsutil.WriteFileAtomic(fsutil.OS, filepath.Join(s.dir, checkpointFile), c.encode()); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	clear(s.dirtyHours)
	s.ckptDirty = false
	if s.replayPos != s.ckptWAL {
		s.ckptWAL = s.replayPos
		s.trimWAL(s.replayPos)
	}
	return nil
}

// syncWorkers is how many fdatasyncs of schedule files a checkpoint runs at
// once: with messages spread over hundreds of hours, each checkpoint syncs
// hundreds of files, and the file system commits concurrent syncs together
// (721 files: about 130 ms one by one, 40 ms sixteen at a time, here).
const syncWorkers = 16

// syncSchedules fdatasyncs the schedule files written since the last
// checkpoint.
func (s *Store) syncSchedules() error {
	hours := make(chan int64)
	errs := make(chan error, syncWorkers)
	var wg sync.WaitGroup
	for i := 0; i < min(syncWorkers, len(s.dirtyHours)); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var first error
			for h := range hours {
				if first != nil {
					continue
				}
				cf, err := s.schedules.acquire(h, false)
				if err != nil {
					first = err
					continue
				}
				if err := fdatasync(cf.f); err != nil {
					first = fmt.Errorf("sync schedule file %s: %w", hourName(h), err)
				}
				s.schedules.release(cf)
			}
			errs <- first
		}()
	}
	for h := range s.dirtyHours {
		hours <- h
	}
	close(hours)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// trimWAL deletes message-log segments that lie wholly before pos.
func (s *Store) trimWAL(pos int64) {
	dir := filepath.Join(s.dir, walDir)
	segs, err := listSegments(dir)
	if err != nil {
		s.lg.Warn("list message-log segments", zap.Error(err))
		return
	}
	for i := 0; i+1 < len(segs) && segs[i+1] <= pos; i++ {
		if err := os.Remove(filepath.Join(dir, segmentName(segs[i]))); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.lg.Warn("trim message log", zap.Int64("base", segs[i]), zap.Error(err))
		}
	}
}

// retain deletes the files of hours that are fully dispatched and ended
// more than Keep ago. The checkpoint forgets them first, so a crash in
// between leaves files that the next start removes.
func (s *Store) retain(now int64) {
	cut := now - s.opts.Keep.Milliseconds()
	var drop []int64
	s.mu.Lock()
	for h, st := range s.hours {
		if _, dirty := s.dirtyHours[h]; st.full(h) && !dirty && st.dispatched >= st.records && hourStart(h+1) <= cut {
			drop = append(drop, h)
		}
	}
	for _, h := range drop {
		delete(s.hours, h)
	}
	s.mu.Unlock()
	if len(drop) == 0 {
		return
	}
	if err := s.checkpoint(true); err != nil {
		s.lg.Error("retention checkpoint failed; files kept", zap.Error(err))
		return
	}
	for _, h := range drop {
		s.schedules.forget(h)
		if err := os.Remove(filepath.Join(s.dir, scheduleDir, hourName(h))); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.lg.Warn("remove schedule file", zap.String("hour", hourName(h)), zap.Error(err))
		}
		if err := s.dispatch.remove(h); err != nil {
			s.lg.Warn("remove dispatch log", zap.String("hour", hourName(h)), zap.Error(err))
		}
	}
	s.lg.Info("retention removed dispatched hours", zap.Int("hours", len(drop)))
}

package store

import (
	"sort"
	"time"

	"go.uber.org/zap"
)

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
	limit := min(st.size, maxScheduleFile) // the replay writes no more (entry.go)
	// Only entries inside the file count (there should be none outside: a
	// slave's copy takes an entry only once it holds the record).
	inside := sort.Search(len(offs), func(i int) bool { return offs[i] >= limit })
	if first && int64(inside) >= st.records {
		s.mu.Lock()
		st.loadedTo, st.dispatched = to, int64(inside)
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
		st.dispatched = int64(inside)
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
	scan := scanSchedule(cf.File, limit, maxRecordSize, func(off int64, msg []byte) {
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
		batch = append(batch, wheelAdd{due: due, e: newEntry(h, off, len(msg))})
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

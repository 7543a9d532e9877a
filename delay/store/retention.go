package store

import (
	"errors"
	"os"
	"path/filepath"

	"go.uber.org/zap"
)

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
		delete(s.cancelled, h)
		c := &s.changes.log
		c.version++
		c.removed[h] = c.version
		delete(c.changed, h)
	}
	s.mu.Unlock()
	if len(drop) > 0 {
		s.changes.fire()
	}
	if len(drop) == 0 {
		return
	}
	dropped := make(map[int64]bool, len(drop))
	for _, h := range drop {
		dropped[h] = true
	}
	s.idx.dropHours(dropped)
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

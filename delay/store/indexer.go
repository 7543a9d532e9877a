package store

import (
	"time"

	"go.uber.org/zap"
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
		err = s.checkpoint(force)
		switch {
		case err != nil && !s.ckptFailing:
			s.lg.Error("checkpoint failed; retried every checkpoint interval", zap.Error(err))
		case err != nil:
			s.lg.Debug("checkpoint failed again", zap.Error(err))
		case s.ckptFailing:
			s.lg.Info("checkpoint written again")
		}
		s.ckptFailing = err != nil
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
// checkpoint, the next hour load or a stalled replay's retry, whichever
// comes first.
func (s *Store) indexWait(now time.Time) time.Duration {
	wait := s.opts.CheckpointInterval
	if at, ok := s.nextLoad(); ok {
		if until := time.Duration(at-now.UnixMilli()) * time.Millisecond; until < wait {
			wait = until
		}
	}
	if s.indexFailure() != nil {
		wait = min(wait, s.replayRetryAt.Sub(now))
	}
	if wait < time.Millisecond {
		wait = time.Millisecond
	}
	return wait
}

package store

import (
	"sort"
	"time"

	"go.uber.org/zap"
)

type firedEntry struct {
	due int64
	e   entry
}

// fireLoop hands out entries whose due time has come. It sleeps until the
// earliest entry is due, but at most one tick, so a wall clock that jumps
// forward is noticed within a tick (real timers run on the monotonic
// clock); entries are compared with the clock at fire time, so a clock that
// jumps back never makes one early.
func (s *Store) fireLoop() {
	defer s.wg.Done()
	timer := s.clock.NewTimer(s.opts.Tick)
	defer timer.Stop()
	var fired []firedEntry
	for {
		nowTime := s.clock.Now()
		now := nowTime.UnixMilli()
		fired = fired[:0]
		bytes := 0
		collect := func(due int64, e entry) {
			// The fire rule (cancel.go): a cancelled entry is dropped; every
			// other raises the mark Cancel compares due times with.
			if len(s.cancelled) > 0 && s.cancelled.has(e.hour(), e.offset()) {
				s.cancelled.mark(e.hour(), e.offset(), cancelSkipped)
				return
			}
			s.fireMark = max(s.fireMark, due)
			fired = append(fired, firedEntry{due: due, e: e})
			bytes += int(e.size)
		}
		s.mu.Lock()
		for len(fired) < s.opts.FireBatch && bytes < s.opts.FireBatchBytes {
			if s.wheel.Expire(now, 1, collect) == 0 {
				break
			}
		}
		next, ok := s.wheel.NextDue()
		s.mu.Unlock()
		if len(fired) > 0 {
			if batch := s.readFired(fired); len(batch) > 0 {
				select {
				case s.due <- batch:
				case <-s.quit:
					return
				}
			}
			continue
		}
		// Sleep until the next entry is due, or a tick at most. The deadline
		// is absolute: a clock that moved since nowTime cannot delay it.
		deadline := nowTime.Add(s.opts.Tick)
		if ok && next < deadline.UnixMilli() {
			deadline = time.UnixMilli(next)
		}
		timer.ResetAt(deadline)
		select {
		case <-timer.C():
		case <-s.fireWake:
		case <-s.quit:
			return
		}
	}
}

// readFired reads the messages of fired (in due order) from their schedule
// files, coalescing neighbouring records into one read, and registers the
// batch as in flight.
func (s *Store) readFired(fired []firedEntry) []Due {
	order := make([]int, len(fired))
	total := 0
	for i := range fired {
		order[i] = i
		total += scheduleHeaderSize + int(fired[i].e.size)
	}
	sort.Slice(order, func(a, b int) bool {
		x, y := fired[order[a]].e, fired[order[b]].e
		if x.hour() != y.hour() {
			return x.hour() < y.hour()
		}
		return x.offset() < y.offset()
	})
	buf := make([]byte, total)
	pos := make([]int, len(fired)) // where each entry's record is in buf; -1 if unread
	p := 0
	for i := 0; i < len(order); {
		first := fired[order[i]].e
		j := i
		end := first.offset() + scheduleHeaderSize + int64(first.size)
		for j+1 < len(order) {
			nx := fired[order[j+1]].e
			if nx.hour() != first.hour() || nx.offset() != end || end-first.offset() >= readRunBytes {
				break
			}
			end += scheduleHeaderSize + int64(nx.size)
			j++
		}
		n := int(end - first.offset())
		err := s.readRun(first.hour(), first.offset(), buf[p:p+n])
		for k := i; k <= j; k++ {
			if err != nil {
				pos[order[k]] = -1
				continue
			}
			pos[order[k]] = p
			p += scheduleHeaderSize + int(fired[order[k]].e.size)
		}
		if err != nil {
			s.lg.Error("read due messages failed", zap.String("hour", hourName(first.hour())),
				zap.Int64("offset", first.offset()), zap.Int("messages", j-i+1), zap.Error(err))
			p += n
		}
		i = j + 1
	}
	out := make([]Due, 0, len(fired))
	for i, f := range fired {
		if pos[i] < 0 {
			s.counters.corrupt.Add(1)
			continue
		}
		msg, err := checkScheduleRecord(buf[pos[i] : pos[i]+scheduleHeaderSize+int(f.e.size)])
		if err != nil {
			s.counters.corrupt.Add(1)
			s.lg.Error("due message is corrupt; left undispatched", zap.String("hour", hourName(f.e.hour())),
				zap.Int64("offset", f.e.offset()), zap.Error(err))
			continue
		}
		out = append(out, Due{
			Ref:       Ref{hour: f.e.hour(), offset: f.e.offset(), size: f.e.size},
			DueMillis: dueOf(msg),
			Message:   msg[:len(msg):len(msg)],
		})
	}
	if len(out) == 0 {
		return nil
	}
	s.mu.Lock()
	s.batchSeq++
	seq := s.batchSeq
	s.inflight[seq] = &firedBatch{minDue: fired[0].due, outstanding: len(out)}
	s.mu.Unlock()
	for i := range out {
		out[i].Ref.batch = seq
	}
	s.counters.fired.Add(uint64(len(out)))
	return out
}

// readRunBytes bounds one coalesced read.
const readRunBytes = 4 << 20

func (s *Store) readRun(hour, off int64, b []byte) error {
	cf, err := s.schedules.acquire(hour, false)
	if err != nil {
		return err
	}
	defer s.schedules.release(cf)
	_, err = cf.File.ReadAt(b, off)
	return err
}

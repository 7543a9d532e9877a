package store

import (
	"fmt"
	"sort"
	"time"

	"go.uber.org/zap"
)

// Due is one message handed out because its time has come.
type Due struct {
	// Ref identifies the message for MarkDispatched.
	Ref Ref
	// DueMillis is the message's due time in Unix milliseconds (0 for a
	// message sent without one), also when it comes out again after
	// Postpone.
	DueMillis int64
	// Message is the message exactly as it was appended. The slice belongs
	// to the receiver.
	Message []byte
}

// Ref names a stored message: its hour file and offset. It is only
// meaningful to the Store that handed it out.
type Ref struct {
	hour   int64
	offset int64
	batch  uint64
	size   uint32
}

// Hour returns the start of the hour file holding the message.
func (r Ref) Hour() time.Time { return time.UnixMilli(hourStart(r.hour)).UTC() }

// Offset returns the message's offset in its hour file.
func (r Ref) Offset() int64 { return r.offset }

// String returns "yyyyMMddHH@offset".
func (r Ref) String() string { return fmt.Sprintf("%s@%d", hourName(r.hour), r.offset) }

// firedBatch counts what a Due batch holds that is not marked dispatched.
type firedBatch struct {
	minDue      int64
	outstanding int
}

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
		if x.hour != y.hour {
			return x.hour < y.hour
		}
		return x.offset < y.offset
	})
	buf := make([]byte, total)
	pos := make([]int, len(fired)) // where each entry's record is in buf; -1 if unread
	p := 0
	for i := 0; i < len(order); {
		first := fired[order[i]].e
		j := i
		end := first.offset + scheduleHeaderSize + int64(first.size)
		for j+1 < len(order) {
			nx := fired[order[j+1]].e
			if nx.hour != first.hour || nx.offset != end || end-first.offset >= readRunBytes {
				break
			}
			end += scheduleHeaderSize + int64(nx.size)
			j++
		}
		n := int(end - first.offset)
		err := s.readRun(int64(first.hour), first.offset, buf[p:p+n])
		for k := i; k <= j; k++ {
			if err != nil {
				pos[order[k]] = -1
				continue
			}
			pos[order[k]] = p
			p += scheduleHeaderSize + int(fired[order[k]].e.size)
		}
		if err != nil {
			s.lg.Error("read due messages failed", zap.String("hour", hourName(int64(first.hour))),
				zap.Int64("offset", first.offset), zap.Int("messages", j-i+1), zap.Error(err))
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
			s.lg.Error("due message is corrupt; left undispatched", zap.String("hour", hourName(int64(f.e.hour))),
				zap.Int64("offset", f.e.offset), zap.Error(err))
			continue
		}
		out = append(out, Due{
			Ref:       Ref{hour: int64(f.e.hour), offset: f.e.offset, size: f.e.size},
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
	_, err = cf.f.ReadAt(b, off)
	return err
}

// MarkDispatched records that the messages have been forwarded and
// acknowledged. Each Ref handed out must be marked once. The entries reach
// the operating system before it returns, so they survive the process being
// killed; they are fsynced within CheckpointInterval (see the crash window
// in the package documentation). It returns the first write error; the
// in-memory counts are updated regardless.
func (s *Store) MarkDispatched(refs []Ref) error {
	if len(refs) == 0 {
		return nil
	}
	sorted := append([]Ref(nil), refs...)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].hour != sorted[j].hour {
			return sorted[i].hour < sorted[j].hour
		}
		return sorted[i].offset < sorted[j].offset
	})
	var first error
	offs := make([]int64, 0, len(sorted))
	for i := 0; i < len(sorted); {
		j := i
		offs = offs[:0]
		for j < len(sorted) && sorted[j].hour == sorted[i].hour {
			offs = append(offs, sorted[j].offset)
			j++
		}
		if err := s.dispatch.append(sorted[i].hour, offs); err != nil && first == nil {
			first = err
		}
		i = j
	}
	s.mu.Lock()
	for _, r := range refs {
		if st := s.hours[r.hour]; st != nil {
			st.dispatched++
		}
		if b := s.inflight[r.batch]; b != nil {
			if b.outstanding--; b.outstanding <= 0 {
				delete(s.inflight, r.batch)
			}
		}
	}
	s.mu.Unlock()
	s.counters.dispatched.Add(uint64(len(refs)))
	return first
}

// Postpone gives messages handed out through Due back to the store, to be
// handed out again when the clock reads at; the receiver drops its copies.
// A forwarder that cannot deliver for a while (a realtime broker down) uses
// it so that waiting messages cost a wheel entry each instead of their bytes.
// A postponed message is not dispatched: after a restart it comes out at
// once (its due time has passed). Each Ref handed out must end in exactly
// one MarkDispatched or Postpone; a postponed message comes out again with a
// new Ref.
func (s *Store) Postpone(refs []Ref, at time.Time) {
	ms := at.UnixMilli()
	s.mu.Lock()
	for _, r := range refs {
		s.wheel.Add(ms, entry{hour: int32(r.hour), size: r.size, offset: r.offset})
		if b := s.inflight[r.batch]; b != nil {
			if b.outstanding--; b.outstanding <= 0 {
				delete(s.inflight, r.batch)
			}
		}
	}
	s.mu.Unlock()
	signal(s.fireWake)
}

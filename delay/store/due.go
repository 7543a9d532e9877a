package store

import (
	"fmt"
	"sort"
	"time"
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
	for i := range sorted {
		if i == 0 || sorted[i].hour != sorted[i-1].hour {
			s.changes.log.noteLocked(sorted[i].hour)
		}
	}
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
	s.changes.fire()
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
		s.wheel.Add(ms, newEntry(r.hour, r.offset, int(r.size)))
		if b := s.inflight[r.batch]; b != nil {
			if b.outstanding--; b.outstanding <= 0 {
				delete(s.inflight, r.batch)
			}
		}
	}
	s.mu.Unlock()
	signal(s.fireWake)
}

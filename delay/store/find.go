package store

import (
	"fmt"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// ScheduleState is where a message Find reports stands.
type ScheduleState uint8

const (
	// SchedulePending: it will be forwarded at its due time.
	SchedulePending ScheduleState = iota + 1
	// ScheduleCancelled: cancelled, or rescheduled (another record, with
	// the new time, holds it): this record is never forwarded.
	ScheduleCancelled
	// ScheduleFired: it has been or is being forwarded.
	ScheduleFired
)

// Scheduled is a stored message Find reports: where its record lies (the
// hour file, Unix hours, and the record's offset in it), its due time
// (Unix ms) and what became of it.
type Scheduled struct {
	Hour, Offset int64
	Due          int64
	State        ScheduleState
	Message      []byte
}

// Find reports the messages of t's subject with t's id (ByID; of any
// subject when t.Subject is empty) or schedule key that the store still holds (a message stays until its hour file is
// removed), as Cancel would find them, with their state decided as Cancel
// decides it. It waits, as Cancel does, until every message acknowledged
// before the call is indexed.
func (s *Store) Find(t protocol.ScheduleTarget) ([]Scheduled, error) {
	if t.ByID && t.Subject == "" {
		if t.Key == "" || len(t.Key) > protocol.MaxScheduleKeyLen {
			return nil, protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("message id of %d bytes", len(t.Key)))
		}
	} else if err := s.opts.Limits.CheckScheduleTarget(t); err != nil {
		return nil, err
	}
	if err := s.awaitReplay(s.replayLimit()); err != nil {
		return nil, err
	}
	hits, _ := s.lookup(0, t)
	out := make([]Scheduled, 0, len(hits))
	s.mu.Lock()
	for _, c := range hits {
		st := SchedulePending
		switch {
		case s.cancelled.has(c.h, c.off):
			st = ScheduleCancelled
		case c.due <= s.fireMark:
			st = ScheduleFired
		}
		out = append(out, Scheduled{Hour: c.h, Offset: c.off, Due: c.due, State: st, Message: c.msg})
	}
	s.mu.Unlock()
	return out, nil
}

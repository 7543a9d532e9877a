package store

import (
	"sort"
	"time"
)

// Stats is a snapshot of the store for metrics and the admin tools.
type Stats struct {
	// Pending counts stored messages not yet marked dispatched.
	Pending int64
	// InWheel counts messages loaded into the wheel and not yet due.
	InWheel int
	// InFlight counts messages handed out through Due and not yet marked.
	InFlight int64
	// Hours lists every hour that has a schedule file, ascending.
	Hours []HourStats
	// OldestPending is the due time of the oldest undispatched message (at
	// most that: the start of its hour, or its hour's load mark, when it is
	// not loaded yet); zero when none.
	OldestPending time.Time
	// WALWritten, WALDurable and Replayed are message-log offsets: written,
	// fdatasynced, and replayed into schedule files (messages between
	// Replayed and WALDurable are stored but not yet in Pending).
	WALWritten, WALDurable, Replayed int64
	// Refusing says why Append refuses messages now ("": it takes them): a
	// failed message-log write or sync (until the store is reopened);
	// schedule files that cannot be written, such as on a full disk (until
	// the replay, retrying every second, catches up); or a new message-log segment
	// that could not be made (until one can: messages that fit in the
	// current segment are still taken).
	Refusing string
	// Appended, Rejected, Fired, Dispatched and Corrupt count messages since
	// Open: stored, refused by Append, handed out through Due, marked
	// dispatched, and found corrupt on read-back.
	Appended, Rejected, Fired, Dispatched, Corrupt uint64
}

// HourStats describes one hour file.
type HourStats struct {
	// Hour is the start of the hour (UTC).
	Hour time.Time
	// Records and Dispatched count the hour's messages and the ones marked
	// dispatched.
	Records, Dispatched int64
	// Loaded says the hour's messages are in the wheel up to LoadedTo: those
	// due by then are in the wheel, handed out or dispatched.
	Loaded   bool
	LoadedTo time.Time
}

// Pending returns the hour's messages not yet dispatched.
func (h HourStats) Pending() int64 {
	if h.Dispatched >= h.Records {
		return 0
	}
	return h.Records - h.Dispatched
}

// Stats returns a snapshot.
func (s *Store) Stats() Stats {
	st := Stats{
		WALWritten: s.written.Load(),
		WALDurable: s.durable.Load(),
		Appended:   s.counters.appended.Load(),
		Rejected:   s.counters.rejected.Load(),
		Fired:      s.counters.fired.Load(),
		Dispatched: s.counters.dispatched.Load(),
		Corrupt:    s.counters.corrupt.Load(),
	}
	if err := s.refusal(); err != nil {
		st.Refusing = err.Error()
	} else if err := s.rollFailure(); err != nil {
		st.Refusing = err.Error()
	}
	oldest := int64(-1)
	older := func(ms int64) {
		if oldest < 0 || ms < oldest {
			oldest = ms
		}
	}
	s.mu.Lock()
	st.Replayed = s.changes.log.replayed
	st.Hours = make([]HourStats, 0, len(s.hours))
	for h, hs := range s.hours {
		hst := HourStats{Hour: time.UnixMilli(hourStart(h)).UTC(), Records: hs.records, Dispatched: hs.dispatched, Loaded: hs.loaded()}
		if hst.Loaded {
			hst.LoadedTo = time.UnixMilli(hs.loadedTo).UTC()
		}
		st.Hours = append(st.Hours, hst)
		st.Pending += hst.Pending()
		switch {
		case hst.Pending() == 0:
		case !hs.loaded():
			older(hourStart(h))
		case !hs.full(h):
			older(hs.loadedTo + 1) // perhaps messages past the load mark
		}
	}
	st.InWheel = s.wheel.Len()
	if d, ok := s.wheel.NextDue(); ok {
		older(d)
	}
	for _, b := range s.inflight {
		st.InFlight += int64(b.outstanding)
		older(b.minDue)
	}
	s.mu.Unlock()
	sort.Slice(st.Hours, func(i, j int) bool { return st.Hours[i].Hour.Before(st.Hours[j].Hour) })
	if oldest >= 0 {
		st.OldestPending = time.UnixMilli(oldest).UTC()
	}
	return st
}

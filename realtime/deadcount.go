package realtime

import (
	"errors"
	"sync"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/realtime/store"
)

// Dead-letter counts. How many dead letters a (subject, group) holds is
// the letters of its dead subject that are not removed (re-driven or
// purged) and not tombstones, which only a read of the subject can tell.
// A deadCounter remembers the count up to the sequence it read through, so
// a later count reads only the letters that arrived since; it starts over
// when the removals changed (re-drive, purge), when retention dropped the
// front of the subject, or on a new term (another store). Counts are what
// CmdBrokerStats answers as the group's backlog on its dead subject, and
// the qmq_realtime_dead_letters series; a slave reports none (its removal
// state is read only once it is master).
type deadCounts struct {
	mu     sync.Mutex
	counts map[string]*deadCounter // by dead subject
}

type deadCounter struct {
	store   *store.Store
	minSeq  int64 // the subject's first kept sequence when counted
	through int64 // the removal state when counted: deadState.Through,
	removed int   // and len(deadState.Removed)
	next    int64 // read below this sequence
	letters int64
}

// deadLetterCount returns the number of dead letters of dead subject s
// (stats from store.Stats), reading only what arrived since the last count
// when nothing else changed.
func (b *Broker) deadLetterCount(s store.SubjectStats) (int64, error) {
	st, err := b.deadState(s.Subject)
	if err != nil {
		return 0, err
	}
	cur := b.st()
	dc := &b.deadCounts
	dc.mu.Lock()
	defer dc.mu.Unlock()
	c := dc.counts[s.Subject]
	if c == nil || c.store != cur || c.minSeq != s.MinSeq || c.through != st.Through || c.removed != len(st.Removed) || c.next > s.NextSeq {
		c = &deadCounter{store: cur, minSeq: s.MinSeq, through: st.Through, removed: len(st.Removed), next: s.MinSeq}
	}
	if c.next < s.NextSeq {
		err := b.scanDead(s.Subject, c.next, &st, func(p store.Pulled) bool {
			if p.ConsumeSeq >= s.NextSeq {
				return false
			}
			c.letters++
			return true
		})
		if err != nil {
			return 0, err
		}
		// Every sequence below NextSeq was read: what was not counted is a
		// tombstone or removed.
		c.next = s.NextSeq
	}
	if dc.counts == nil {
		dc.counts = map[string]*deadCounter{}
	}
	dc.counts[s.Subject] = c
	return c.letters, nil
}

// deadLetterCounts returns the dead letters per dead subject of the
// store's subjects (none on a slave); a subject that cannot be read is left
// out.
func (b *Broker) deadLetterCounts(subjects []store.SubjectStats) map[string]int64 {
	out := map[string]int64{}
	if b.st().Replica().Active() {
		return out
	}
	for _, s := range subjects {
		if kind, _, _, ok := protocol.ParseSystemSubject(s.Subject); !ok || kind != protocol.KindDead {
			continue
		}
		n, err := b.deadLetterCount(s)
		if errors.Is(err, store.ErrUnknownSubject) {
			continue
		}
		if err != nil {
			b.lg.Debug("cannot count dead letters: " + err.Error())
			continue
		}
		out[s.Subject] = n
	}
	return out
}

package realtime

import (
	"sync"
	"time"

	"github.com/qmq-go/qmq/realtime/store"
)

// subjectRates keeps each subject's in-rate (sequences assigned per second)
// and each consumer group's out-rate (entries taken per second: its cursor's
// advance) between two store snapshots, the ones the heartbeat reports take
// (report), so CmdBrokerStats answers the rates of the last heartbeat
// interval without a sampling loop of its own. A name that appears for the
// first time has rate 0 until the next snapshot.
type subjectRates struct {
	mu      sync.Mutex
	at      time.Time
	seqs    map[string]int64    // subject → NextSeq at the last snapshot
	cursors map[groupKey]int64  // group → Cursor at the last snapshot
	in      map[string]uint32   // subject → messages stored per second
	out     map[groupKey]uint32 // group → entries taken per second
}

type groupKey struct{ subject, group string }

// update takes a snapshot's positions and computes the rates since the one
// before.
func (r *subjectRates) update(st *store.Stats) {
	now := time.Now()
	seqs := make(map[string]int64, len(st.Subjects))
	cursors := make(map[groupKey]int64, len(st.Groups))
	in := make(map[string]uint32, len(st.Subjects))
	out := make(map[groupKey]uint32, len(st.Groups))
	r.mu.Lock()
	defer r.mu.Unlock()
	secs := now.Sub(r.at).Seconds()
	rate := func(cur, prev int64, ok bool) uint32 {
		if !ok || r.at.IsZero() || secs <= 0 || cur <= prev {
			return 0
		}
		return uint32(min(float64(cur-prev)/secs, float64(^uint32(0))))
	}
	for _, s := range st.Subjects {
		seqs[s.Subject] = s.NextSeq
		prev, ok := r.seqs[s.Subject]
		in[s.Subject] = rate(s.NextSeq, prev, ok)
	}
	for _, g := range st.Groups {
		if g.Broadcast {
			continue
		}
		k := groupKey{g.Subject, g.Group}
		cursors[k] = g.Cursor
		prev, ok := r.cursors[k]
		out[k] = rate(g.Cursor, prev, ok)
	}
	r.at, r.seqs, r.cursors, r.in, r.out = now, seqs, cursors, in, out
}

// inPerSec returns subject's in-rate as of the last snapshot.
func (r *subjectRates) inPerSec(subject string) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.in[subject]
}

// outPerSec returns a group's out-rate as of the last snapshot.
func (r *subjectRates) outPerSec(subject, group string) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out[groupKey{subject, group}]
}

package store

import (
	"sort"
	"sync/atomic"
	"time"
)

type counters struct {
	appended       atomic.Int64
	rejected       atomic.Int64
	failedAppends  atomic.Int64
	syncs          atomic.Int64
	pulled         atomic.Int64
	acked          atomic.Int64
	corruptReads   atomic.Int64
	corruptRanges  atomic.Int64
	badCheckpoints atomic.Int64
	checkpoints    atomic.Int64
	zeroFilled     atomic.Int64
	cacheDropped   atomic.Int64
}

// Stats is a snapshot of the store.
type Stats struct {
	// MessageLogStart and MessageLogEnd bound the kept message log;
	// MessageLogBytes is the disk it takes (whole preallocated segments).
	MessageLogStart, MessageLogEnd, MessageLogBytes int64
	MessageLogSegments                              int
	ActionLogBytes                                  int64
	// RetentionBoundary is the offset below which the next retention pass
	// deletes (equal to MessageLogStart when it deletes nothing).
	RetentionBoundary int64
	// OpenFiles is the number of consume-log and pull-log files open.
	OpenFiles int
	// BufferBytes is the memory of the subjects' consume-log buffers
	// (outside the Go heap: see subject.go, pendingBuffers), and
	// BufferBytesInUse the part of it held by subjects.
	BufferBytes, BufferBytesInUse int64
	Subjects                      []SubjectStats
	Groups                        []GroupStats
	// Counters since Open.
	Appended, Rejected, FailedAppends, Syncs, Pulled, Acks int64
	// CorruptReads counts entries or messages that failed validation when
	// read and were not served; CorruptRanges counts damaged ranges skipped
	// by recovery.
	CorruptReads, CorruptRanges, Checkpoints int64
	// ZeroFilled counts the bytes of the message log written with zeros
	// ahead of its end (zeroFillLoop).
	ZeroFilled int64
	// PageCacheDropped counts the bytes of the message log dropped from the
	// page cache behind PageCacheWindow (pageCacheLoop).
	PageCacheDropped int64
	// Open is what Open found and did (recovery).
	Open OpenReport
}

// SubjectStats describes one subject.
type SubjectStats struct {
	Subject string
	// MinSeq is the first kept sequence, NextSeq the next to be assigned;
	// Entries = NextSeq - MinSeq.
	MinSeq, NextSeq, Entries int64
	// Bytes is the message-log bytes of the kept entries.
	Bytes int64
	// RetentionDropSeq: the next retention pass deletes sequences below it.
	RetentionDropSeq int64
}

// GroupStats describes one consumer group of a subject (or one broadcast
// subscriber).
type GroupStats struct {
	Subject, Group string
	Broadcast      bool
	// Cursor is the next sequence the group takes; Backlog = NextSeq - Cursor
	// (plus Returned).
	Cursor, Backlog int64
	// Returned counts entries handed back by dead consumers, not yet re-pulled.
	Returned int64
	// AtRisk counts entries the group has not taken yet (from the cursor on,
	// and returned entries) that the next retention pass would delete.
	// Entries pulled and not yet acked are not counted.
	AtRisk    int64
	Consumers []ConsumerStats
}

// ConsumerStats describes one consumer of a group.
type ConsumerStats struct {
	ID string
	// PullSeq is the next pull sequence, AckSeq the highest acked (-1 none),
	// Unacked = PullSeq - 1 - AckSeq.
	PullSeq, AckSeq, Unacked int64
	LastSeen                 time.Time
}

// Stats returns a snapshot: sizes, per-subject and per-group positions, and
// what retention would drop before it is consumed. It reads every subject
// and group, so it is for admin calls, not hot paths.
func (s *Store) Stats() Stats {
	st := Stats{
		MessageLogStart:   s.msgLog.Start(),
		MessageLogEnd:     s.goodEnd.Load(),
		Open:              s.open,
		RetentionBoundary: s.retentionBoundary(),
		Appended:          s.stats.appended.Load(),
		Rejected:          s.stats.rejected.Load(),
		FailedAppends:     s.stats.failedAppends.Load(),
		Syncs:             s.stats.syncs.Load(),
		Pulled:            s.stats.pulled.Load(),
		Acks:              s.stats.acked.Load(),
		CorruptReads:      s.stats.corruptReads.Load(),
		CorruptRanges:     s.stats.corruptRanges.Load(),
		Checkpoints:       s.stats.checkpoints.Load(),
		ZeroFilled:        s.stats.zeroFilled.Load(),
		PageCacheDropped:  s.stats.cacheDropped.Load(),
	}
	for _, sg := range s.msgLog.Segments() {
		st.MessageLogBytes += sg.Size
		st.MessageLogSegments++
	}
	for _, sg := range s.actLog.Segments() {
		st.ActionLogBytes += sg.Size
	}
	st.OpenFiles, _ = s.pool.Stats()
	st.BufferBytes, st.BufferBytesInUse = s.pendingBuffers.stats()
	drop := map[*subject]int64{}
	for _, sj := range s.subjectList() {
		sj.mu.RLock()
		ss := SubjectStats{Subject: sj.name, MinSeq: sj.min, NextSeq: sj.visible, Entries: sj.visible - sj.min, Bytes: sj.bytes}
		sj.mu.RUnlock()
		ss.RetentionDropSeq = ss.MinSeq
		if st.RetentionBoundary > st.MessageLogStart {
			ss.RetentionDropSeq, _ = s.firstSeqAtOffset(sj, ss.MinSeq, ss.NextSeq, st.RetentionBoundary)
		}
		drop[sj] = ss.RetentionDropSeq
		st.Subjects = append(st.Subjects, ss)
	}
	sort.Slice(st.Subjects, func(i, j int) bool { return st.Subjects[i].Subject < st.Subjects[j].Subject })
	s.groupsMu.RLock()
	groups := make([]*group, 0, len(s.groups))
	for _, g := range s.groups {
		groups = append(groups, g)
	}
	s.groupsMu.RUnlock()
	for _, g := range groups {
		lo, visible := g.subj.bounds()
		dropSeq, ok := drop[g.subj]
		if !ok {
			dropSeq = lo
		}
		g.mu.Lock()
		gs := GroupStats{Subject: g.key.subject, Group: g.key.group, Broadcast: g.key.broadcast, Cursor: g.cursor}
		gs.Returned = runsLen(g.returned)
		gs.Backlog = max(0, visible-max(g.cursor, lo)) + gs.Returned
		gs.AtRisk = max(0, dropSeq-max(g.cursor, lo))
		for _, r := range g.returned {
			from, to := max(r.start, lo), min(r.start+int64(r.count), dropSeq)
			gs.AtRisk += max(0, to-from)
		}
		for _, c := range g.consumers {
			st.CorruptReads += c.bad
			gs.Consumers = append(gs.Consumers, ConsumerStats{ID: c.id, PullSeq: c.next, AckSeq: c.acked, Unacked: max(0, c.next-1-c.acked), LastSeen: c.seen})
		}
		g.mu.Unlock()
		sort.Slice(gs.Consumers, func(i, j int) bool { return gs.Consumers[i].ID < gs.Consumers[j].ID })
		st.Groups = append(st.Groups, gs)
	}
	sort.Slice(st.Groups, func(i, j int) bool {
		if st.Groups[i].Subject != st.Groups[j].Subject {
			return st.Groups[i].Subject < st.Groups[j].Subject
		}
		return st.Groups[i].Group < st.Groups[j].Group
	})
	return st
}

package store

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/qmq-go/qmq/pkg/segment"
)

// groupKey names a consumer group of a subject. A broadcast subscription is
// a group of its own named by the consumer id.
type groupKey struct {
	subject   string
	group     string
	broadcast bool
}

// group is one (subject, group): the shared cursor, the queue of entries
// handed back by dead consumers, and the consumers. mu guards everything in
// it and in its consumers.
type group struct {
	key  groupKey
	subj *subject
	dir  string

	mu        sync.Mutex
	version   uint64
	cursor    int64 // next consume seq to hand out
	returned  []run // handed back, served before the cursor
	consumers map[string]*consumer
	lastPull  time.Time
	ahead     readAhead // consume-log entries read ahead of the cursor

	msgAhead messageReadAhead // message-log bytes read ahead (own lock)
}

// consumer is one consumer's progress: pull seqs below next were handed out,
// those up to acked (inclusive) were acked.
type consumer struct {
	id    string
	next  int64
	acked int64
	log   *segment.FixedLog // nil for broadcast
	seen  time.Time
	// Pull-log entries below plFlushed are in the file; plPending buffers
	// the ones after it.
	plFlushed int64
	plPending []byte
	// bad counts pull-log entries that failed their check.
	bad int64
}

func (s *Store) groupFor(key groupKey, create bool, earliest bool) (*group, bool, error) {
	s.groupsMu.RLock()
	g := s.groups[key]
	s.groupsMu.RUnlock()
	if g != nil || !create {
		return g, false, nil
	}
	sj, err := s.subjectFor(key.subject, true)
	if err != nil {
		return nil, false, err
	}
	s.groupsMu.Lock()
	defer s.groupsMu.Unlock()
	if g = s.groups[key]; g != nil {
		return g, false, nil
	}
	g = s.newGroup(key, sj)
	min, visible := sj.bounds()
	g.cursor = visible
	if earliest {
		g.cursor = min
	}
	if err := s.record(g, &action{kind: actCreate, seq: g.cursor}); err != nil {
		return nil, false, err
	}
	s.groups[key] = g
	return g, true, nil
}

func (s *Store) newGroup(key groupKey, sj *subject) *group {
	return &group{
		key:       key,
		subj:      sj,
		dir:       filepath.Join(s.dir, "pulllog", dirName(key.subject), dirName(key.group)),
		consumers: map[string]*consumer{},
	}
}

// consumerFor returns the consumer, creating it; g.mu must be held.
func (s *Store) consumerFor(g *group, id string) (*consumer, error) {
	if c := g.consumers[id]; c != nil {
		return c, nil
	}
	c := &consumer{id: id, acked: -1}
	if !g.key.broadcast {
		l, err := segment.OpenFixed(filepath.Join(g.dir, dirName(id)), segment.FixedOptions{
			FS: s.opts.FS, Width: pullEntryWidth, SegmentEntries: s.opts.PullSegmentEntries, Pool: s.pool,
		})
		if err != nil {
			return nil, err
		}
		c.log = l
	}
	g.consumers[id] = c
	return c, nil
}

// expandRuns lists the consume seqs of runs.
func expandRuns(runs []run) []int64 {
	n := 0
	for _, r := range runs {
		n += int(r.count)
	}
	out := make([]int64, 0, n)
	for _, r := range runs {
		for i := int64(0); i < int64(r.count); i++ {
			out = append(out, r.start+i)
		}
	}
	return out
}

// toRuns compresses consume seqs (void entries included as their own runs).
func toRuns(seqs []int64) []run {
	var out []run
	for _, v := range seqs {
		if n := len(out); n > 0 && v >= 0 && out[n-1].start >= 0 && out[n-1].start+int64(out[n-1].count) == v {
			out[n-1].count++
			continue
		}
		out = append(out, run{start: v, count: 1})
	}
	return out
}

func runsLen(runs []run) int64 {
	n := int64(0)
	for _, r := range runs {
		n += int64(r.count)
	}
	return n
}

// popReturned removes and returns the first returned entry.
func (g *group) popReturned() int64 {
	r := &g.returned[0]
	v := r.start
	r.start++
	r.count--
	if r.count == 0 {
		g.returned = g.returned[1:]
	}
	return v
}

// dropReturned removes the first n returned entries (replay).
func (g *group) dropReturned(n int64) {
	for n > 0 && len(g.returned) > 0 {
		g.popReturned()
		n--
	}
}

// apply changes the group as action a says. Live operations and recovery
// both use it, so a replayed log rebuilds exactly the live state. Pull-log
// files are written by the caller.
func (g *group) apply(s *Store, a *action) error {
	g.version = a.version
	switch a.kind {
	case actCreate, actReset:
		g.cursor = a.seq
		g.returned = nil
		return nil
	}
	c, err := s.consumerFor(g, a.consumer)
	if err != nil {
		return err
	}
	switch a.kind {
	case actPull:
		g.dropReturned(int64(a.taken))
		g.cursor = max(g.cursor, a.cursor)
		if g.key.broadcast {
			c.next = g.cursor
			return nil
		}
		if a.seq > c.next {
			if err := c.writeVoids(c.next, a.seq-c.next); err != nil {
				return err
			}
		}
		c.next = a.seq + a.runCount
	case actAck:
		c.acked = max(c.acked, a.seq)
	case actVoid:
		if a.seq > c.next {
			if err := c.writeVoids(c.next, a.seq-c.next); err != nil {
				return err
			}
			c.next = a.seq
		}
	case actReturn:
		g.returned = append(g.returned, a.runs...)
		c.acked = max(c.acked, a.seq)
	case actRemove:
		if c.log != nil {
			c.log.Remove()
		}
		delete(g.consumers, a.consumer)
	}
	return nil
}

// maxVoid bounds how many unknown pull sequences one pull or ack may void:
// far more than a crash can lose (ActionFlushInterval of pulls), far less
// than a bogus sequence would cost.
const maxVoid = 1 << 20

// voidChunk is a run of void entries that writeVoids writes from.
var voidChunk = func() []int64 {
	out := make([]int64, 4096)
	for i := range out {
		out[i] = voidEntry
	}
	return out
}()

// record appends a live action to the action log and applies it to the
// group; g.mu must be held. The action is appended first so that an action
// that cannot be logged changes nothing.
func (s *Store) record(g *group, a *action) error {
	a.version = g.version + 1
	a.broadcast = g.key.broadcast
	a.subject, a.group = g.key.subject, g.key.group
	p := encodeActionHead(make([]byte, 0, 64), a.kind, a.broadcast, a.subject, a.group, a.consumer, a.version)
	switch a.kind {
	case actCreate, actReset, actAck, actVoid:
		p = binary.BigEndian.AppendUint64(p, uint64(a.seq))
	case actPull:
		p = binary.BigEndian.AppendUint64(p, uint64(a.seq))
		p = binary.BigEndian.AppendUint32(p, a.taken)
		p = binary.BigEndian.AppendUint64(p, uint64(a.cursor))
		p = appendRuns(p, a.runs)
	case actReturn:
		p = binary.BigEndian.AppendUint64(p, uint64(a.seq))
		p = appendRuns(p, a.runs)
	}
	if err := s.actions.append(a.kind, p); err != nil {
		return fmt.Errorf("%w: action log: %w", ErrIO, err)
	}
	return g.apply(s, a)
}

package store

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/qmq-go/qmq/pkg/segment"
)

// Pull-log entry: 8 bytes, big-endian; entry p of a consumer names the
// consume sequence it got as pull sequence p:
//
//	0                          6            8
//	+--------------------------+------------+
//	| consume seq (48 bits)    |  check u16 |
//	+--------------------------+------------+
//
// check is 16 bits of a hash of (p, consume seq) (pullCheck), so a damaged,
// stale or misplaced entry is recognised (but for 1 in 65,536) and never
// served: it reads as void. All ones is a void entry: a pull sequence
// that maps to nothing (see actVoid).
const (
	pullEntryWidth       = 8
	voidEntry      int64 = -1
	voidBits             = ^uint64(0)
)

// pullCheck mixes (p, seq) with splitmix64's finaliser and keeps 16 bits.
func pullCheck(p, seq int64) uint64 {
	x := uint64(p)*0x9E3779B97F4A7C15 ^ uint64(seq)
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return x & 0xffff
}

func encodePullEntry(p, seq int64) uint64 {
	if seq < 0 {
		return voidBits
	}
	return uint64(seq)<<16 | pullCheck(p, seq)
}

// decodePullEntry returns the consume seq of entry p, voidEntry for a void
// one, and ok false when the entry fails its check.
func decodePullEntry(p int64, v uint64) (int64, bool) {
	if v == voidBits {
		return voidEntry, true
	}
	seq := int64(v >> 16)
	if v&0xffff != pullCheck(p, seq) {
		return voidEntry, false
	}
	return seq, true
}

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

// pullFlushBytes is how many pull-log bytes a consumer buffers before
// writing them to its file (pull logs are rebuilt from the action log, so
// only checkpoints need them on disk). The write happens under the group's
// lock, inside a pull: at 4 KiB a consumer draining a backlog wrote every
// 512 entries (a pwrite per few pulls, ~3% of a flooded broker's CPU); at
// 32 KiB it writes an eighth as often. The cost is memory: up to 32 KiB per
// consumer that pulls (idle consumers buffer nothing past a checkpoint).
const pullFlushBytes = 32 << 10

// writePullLog records consume seqs for pull seqs from first on. Entries are
// buffered; a failed flush keeps them buffered (a checkpoint reports it).
func (c *consumer) writePullLog(first int64, seqs []int64) error {
	if c.log == nil || len(seqs) == 0 {
		return nil
	}
	tail := c.plFlushed + int64(len(c.plPending)/pullEntryWidth)
	if first < tail {
		// Rewriting entries (recovery): go straight to the file.
		if err := c.flushPullLog(); err != nil {
			return err
		}
		buf := make([]byte, len(seqs)*pullEntryWidth)
		for i, v := range seqs {
			binary.BigEndian.PutUint64(buf[i*pullEntryWidth:], encodePullEntry(first+int64(i), v))
		}
		if err := c.log.WriteAt(first, buf); err != nil {
			c.log.Truncate(c.plFlushed)
			return fmt.Errorf("%w: pull log of %s: %w", ErrIO, c.id, err)
		}
		c.plFlushed = max(c.plFlushed, first+int64(len(seqs)))
		return nil
	}
	for ; tail < first; tail++ {
		c.plPending = binary.BigEndian.AppendUint64(c.plPending, voidBits)
	}
	for i, v := range seqs {
		c.plPending = binary.BigEndian.AppendUint64(c.plPending, encodePullEntry(first+int64(i), v))
	}
	if len(c.plPending) >= pullFlushBytes {
		c.flushPullLog()
	}
	return nil
}

// flushPullLog writes buffered pull-log entries to the file.
func (c *consumer) flushPullLog() error {
	if c.log == nil || len(c.plPending) == 0 {
		return nil
	}
	if c.log.Err() != nil {
		if err := c.log.Truncate(c.plFlushed); err != nil {
			return fmt.Errorf("%w: pull log of %s: %w", ErrIO, c.id, err)
		}
	}
	if err := c.log.WriteAt(c.plFlushed, c.plPending); err != nil {
		return fmt.Errorf("%w: pull log of %s: %w", ErrIO, c.id, err)
	}
	c.plFlushed += int64(len(c.plPending) / pullEntryWidth)
	c.plPending = c.plPending[:0]
	return nil
}

// readPullLog returns the consume seqs of pull seqs [from, from+n); entries
// that fail their check read as void and are counted in c.bad.
func (c *consumer) readPullLog(from int64, n int64) ([]int64, error) {
	out := make([]int64, n)
	if n == 0 {
		return out, nil
	}
	decode := func(p int64, v uint64) int64 {
		seq, ok := decodePullEntry(p, v)
		if !ok {
			c.bad++
		}
		return seq
	}
	i := int64(0)
	if from < c.plFlushed {
		k := min(n, c.plFlushed-from)
		buf := make([]byte, k*pullEntryWidth)
		got, err := c.log.ReadAt(from, buf)
		if err != nil {
			return nil, fmt.Errorf("pull log of %s: %w", c.id, err)
		}
		for ; i < k; i++ {
			if i < int64(got) {
				out[i] = decode(from+i, binary.BigEndian.Uint64(buf[i*pullEntryWidth:]))
			} else {
				out[i] = voidEntry
			}
		}
	}
	for ; i < n; i++ {
		at := (from + i - c.plFlushed) * pullEntryWidth
		if at+pullEntryWidth <= int64(len(c.plPending)) {
			out[i] = decode(from+i, binary.BigEndian.Uint64(c.plPending[at:]))
		} else {
			out[i] = voidEntry
		}
	}
	return out, nil
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

// writeVoids writes n void entries to the pull log from first, a chunk at
// a time: replay takes n from a record, which may name a gap far larger
// than maxVoid (a damaged range skipped, or a bogus sequence).
func (c *consumer) writeVoids(first, n int64) error {
	for n > 0 {
		k := min(n, int64(len(voidChunk)))
		if err := c.writePullLog(first, voidChunk[:k]); err != nil {
			return err
		}
		first, n = first+k, n-k
	}
	return nil
}

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

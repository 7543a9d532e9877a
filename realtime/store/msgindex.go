package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/segment"
)

// Message index: find stored messages by id or by key (the property
// protocol.PropKey) without reading the log.
//
// The index keeps, for every message record, an entry per name it is found
// by. A master's appends hand them over (feed): the store hashes each
// message's id and key as it checks it (appendAsync, prepareNow, on the
// caller's goroutine), and publish gives each published group's entries,
// with the log range [from, to) they cover, to the feed (a lock and a copy
// of 16 bytes an entry). indexLoop takes the feed every indexFollow (20
// ms), and at once when a lookup waits for it (a wake-up per commit was a
// goroutine switch per message for a producer sending one at a time).
// A replica feeds the entries of the records it indexes (indexReplicated
// parses each one anyway: feedRun). Whatever the feed lacks it reads back
// from the committed log (ReadMessageLogInto) and parses: what recovery
// found past the last run, a gap the feed dropped when it held
// indexFeedMax entries. Reading every record back and parsing it again
// was about a tenth of a producing store's CPU (NOTES.md). The entry:
//
//	hash u64 (indexHash of a kind byte, 'i' or 'k', and the id or key) |
//	message-log offset i64
//
// Entries collect in memory (at most indexRunEntries) and are written,
// bucketed by their hash's top 11 bits (indexsort.go, which draws the
// file), as a run file when that many collected, when the log moves to its
// next segment (a run never spans two), on Close and after an idle second
// with entries waiting (indexIdleSpill):
//
//	dir/index/%020d.run   named by the first offset it covers
//
// Runs of formats 1 and 2, which older code wrote, are still read:
//
//	0          8          16         24          28           32
//	+----------+----------+----------+-----------+------------+
//	| "QMQIDX2\n" | from i64 | to i64 | count u32 | fences u32 |
//	+----------+----------+----------+-----------+------------+
//	32: count × (hash u64 | offset i64), sorted by the hash's top 22 bits,
//	    then offset ("QMQIDX1\n": by the whole FNV-1a hash, then offset)
//	    fences × hash u64: the hash of every indexFence-th entry
//	    crc32c u32 over the header and the fences
//
// A run covers the message-log records in [from, to). It is written to a
// temporary file, fsynced and renamed (then the directory fsynced), so it is
// whole or absent. Open keeps the runs that chain from the oldest without a
// gap and whose header, table (or fences) and size check, drops the others,
// drops runs past the committed end (a truncated log) and indexes the log
// again from the end of the last run kept: what a crash lost (the entries
// still in memory) is rebuilt from the message log. Retention deletes a run
// once the message log no longer keeps any of its records.
//
// A lookup reads, from each run, the bucket of the hash (format 3, checked
// against its checksum) or the block of entries between two fences holding
// it (formats 1 and 2), with that format's hash: one pread; then each
// candidate's record (CRC checked), and keeps it only when the message's id
// or key is the one asked for: a hash collision can hide nothing and a
// wrong message is never returned. A run it cannot read or whose bucket
// does not check fails the lookup (ErrIndexRead) and is built again from
// the log by indexLoop. A lookup first waits (at most indexCatchUp) for the
// index to reach the committed end it saw, so a message acknowledged
// before the lookup is found.
const (
	indexDir               = "index"
	indexMagic3            = "QMQIDX3\n" // format 3: bucketed (indexsort.go)
	indexMagic2            = "QMQIDX2\n" // format 2: sorted by the hash's top 22 bits
	indexMagic1            = "QMQIDX1\n" // format 1: sorted by hash
	indexKeyShift2         = 64 - 22     // format 2's sort key: hash >> indexKeyShift2
	indexHeaderSize        = 32
	indexEntrySize         = 16
	indexFence             = 256
	indexRunEntriesDefault = 1 << 20
	indexMinEntries        = 4096 // the in-memory entries' first array
	indexReadBytes         = 1 << 20
	indexIdleSpill         = time.Second
	// indexFollow is how often the index looks for new records of the
	// log. It does not follow every commit: a wake-up per commit was a
	// goroutine switch per message for a producer sending one at a time
	// (a lookup nudges it instead, see find).
	indexFollow      = 20 * time.Millisecond
	indexCatchUp     = 2 * time.Second
	indexKindID      = 'i'
	indexKindKey     = 'k'
	indexMaxFound    = 1000
	indexRunFileMode = 0o600
)

// indexRunEntries is the most entries kept in memory before a run is
// written (tests lower it).
var indexRunEntries = indexRunEntriesDefault

// ErrNoIndex: the store was opened with Options.NoMessageIndex.
var ErrNoIndex = errors.New("store: message index off")

// ErrIndexRead: a lookup could not read a run of the message index (it
// fails rather than leave that run's messages out).
var ErrIndexRead = errors.New("store: cannot read the message index")

// Found is one stored message a lookup found.
type Found struct {
	Offset  int64     // its message-log record
	Subject string    // the subject it was stored under
	Seq     int64     // its consume-log sequence there
	Stored  time.Time // when the store appended it
	Message []byte    // the encoded message (a copy)
}

type indexEntry struct {
	hash uint64
	off  int64
}

type indexRun struct {
	from, to int64
	count    int
	format   int         // 1, 2 or 3
	table    bucketTable // format 3
	damaged  atomic.Bool // a lookup could not read it: indexLoop builds it again
	shift    uint        // formats 1, 2: entries in the order of hash >> shift (0: format 1, FNV hashes)
	fences   []uint64    // formats 1, 2
	f        *os.File
	path     string
}

type messageIndex struct {
	dir string
	lg  *zap.Logger

	mu      sync.RWMutex
	runs    []*indexRun  // by from
	mem     []indexEntry // entries not in a run yet, for [memFrom, end)
	runBuf  []byte       // the last run's file image (indexsort.go), kept
	memFrom int64
	memSeg  int64 // base of the segment mem's records lie in, -1 when empty
	end     atomic.Int64
	lastAdd time.Time
	nudge   chan struct{} // capacity 1: a lookup waits for the index to catch up

	feed indexFeed
	// copying: a replica's index takes its master's runs (indexcopy.go)
	// and neither reads the log back nor takes a feed. catchUpTo: the
	// committed end when it stopped copying; until the index reaches it a
	// lookup that cannot wait for it says so (ErrIndexBehind).
	copying   atomic.Bool
	catchUpTo atomic.Int64
	copyMu    sync.Mutex // held while a run is added or copying stops
	// segLo, segHi: the message-log segment the last offset asked of
	// segmentOf lies in (indexLoop only).
	segLo, segHi int64
}

// indexFeedMax bounds the entries waiting in the feed: past it a published
// group's entries are dropped and indexLoop reads them back from the log.
var indexFeedMax = 1 << 20 // tests lower it

// indexFeed holds the entries of published groups until indexLoop takes
// them: entries in log order, chunks saying which log range each group's
// entries cover.
type indexFeed struct {
	mu      sync.Mutex
	entries []indexEntry
	chunks  []feedChunk
}

// feedChunk: the entries of one published group, the records in [from, to).
type feedChunk struct {
	from, to int64
	n        int
}

// feedGroup hands the index the entries of g, a group about to be
// published whose records lie in [from, g.end): publish calls it, in log
// order, before the group's callbacks run (its requests' metas hold the
// hashes; a message whose result holds an error was not stored).
func (x *messageIndex) feedGroup(from int64, g *commitGroup) {
	f := &x.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.entries) >= indexFeedMax {
		return // indexLoop reads the group back from the log
	}
	n := len(f.entries)
	for _, r := range g.reqs {
		for i := range r.results {
			res := &r.results[i]
			if res.Err != nil {
				continue
			}
			m := &r.metas[i]
			f.entries = append(f.entries, indexEntry{m.idHash, res.Offset})
			if m.hasKey {
				f.entries = append(f.entries, indexEntry{m.keyHash, res.Offset})
			}
		}
	}
	f.chunks = append(f.chunks, feedChunk{from: from, to: g.end, n: len(f.entries) - n})
}

// feedRun hands the index the entries of the records in [from, to),
// es in offset order: a replica's indexed chunk (indexReplicated, which
// parses every record anyway), so that indexLoop does not read it back
// and parse it again.
func (x *messageIndex) feedRun(from, to int64, es []indexEntry) {
	f := &x.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.entries) >= indexFeedMax {
		return // indexLoop reads the records back from the log
	}
	f.entries = append(f.entries, es...)
	f.chunks = append(f.chunks, feedChunk{from: from, to: to, n: len(es)})
}

// take moves the feed's entries and chunks to the end of entries and
// chunks (indexLoop's own), swapping arrays when those are empty.
func (f *indexFeed) take(entries []indexEntry, chunks []feedChunk) ([]indexEntry, []feedChunk) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(entries) == 0 && len(chunks) == 0 {
		entries, f.entries = f.entries, entries[:0]
		chunks, f.chunks = f.chunks, chunks[:0]
		return entries, chunks
	}
	entries = append(entries, f.entries...)
	chunks = append(chunks, f.chunks...)
	f.entries, f.chunks = f.entries[:0], f.chunks[:0]
	return entries, chunks
}

// indexHashes returns the hashes a message is found by: its id's and,
// when it has one, its key's (the first property protocol.PropKey).
func indexHashes(v *protocol.View) (id, key uint64, hasKey bool) {
	id = indexHash(indexKindID, v.ID)
	if v.PropertyCount() > 0 {
		v.Properties(func(k, val []byte) bool {
			if string(k) == protocol.PropKey {
				key, hasKey = indexHash(indexKindKey, val), true
				return false
			}
			return true
		})
	}
	return id, key, hasKey
}

// indexHash is the hash of runs of format 3 and of the entries in memory.
// It takes the bytes 16 at a time, each pair of words folded by one
// 64×64→128-bit multiply (the high and low halves xored), the last 16
// (or fewer) bytes by a multiply of their own beside the loop's, then a
// final fold with the length and kind, so that the top bits, format 3's
// bucket, depend on every byte. An id of 26 bytes takes three multiplies,
// two of them side by side; format 2's hash (indexHash2) took a dependent
// multiply per 8 bytes and a loop over the last ones.
func indexHash(kind byte, v []byte) uint64 {
	const k0, k1, k2, k3, k4 = 0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9, 0x94d049bb133111eb, 0x2545f4914f6cdd1d, 0x243f6a8885a308d3
	n := len(v)
	seed := uint64(kind)<<56 ^ uint64(n) ^ k0
	acc, all := seed, v
	for len(v) > 16 {
		acc = indexFold(binary.LittleEndian.Uint64(v)^k1, binary.LittleEndian.Uint64(v[8:])^acc)
		v = v[16:]
	}
	// The last 1–16 bytes (overlapping the loop's when n > 16).
	var x, y uint64
	switch {
	case n >= 16:
		x, y = binary.LittleEndian.Uint64(all[n-16:]), binary.LittleEndian.Uint64(all[n-8:])
	case n >= 8:
		x, y = binary.LittleEndian.Uint64(v), binary.LittleEndian.Uint64(v[n-8:])
	case n >= 4:
		x, y = uint64(binary.LittleEndian.Uint32(v)), uint64(binary.LittleEndian.Uint32(v[n-4:]))
	case n > 0:
		x = uint64(v[0])<<16 | uint64(v[n>>1])<<8 | uint64(v[n-1])
	}
	t := indexFold(x^k2, y^k3^seed)
	return indexFold(acc^t^k4, uint64(n)^k1^seed)
}

// indexFold multiplies a and b into 128 bits and xors the halves.
func indexFold(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// indexHash2 is the hash of runs of format 2: eight bytes at a time, each
// word mixed in by a multiply and a shift, then a final mix (so that the
// top 22 bits, format 2's sort key, depend on every byte). FNV-1a, format
// 1's, takes a multiply per byte: an id of 30 bytes cost a storing broker
// 2.5 % of its CPU.
func indexHash2(kind byte, v []byte) uint64 {
	const m1, m2 = 0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9
	h := uint64(kind)<<56 ^ uint64(len(v)) ^ 0x243f6a8885a308d3
	for len(v) >= 8 {
		h = (h ^ binary.LittleEndian.Uint64(v)) * m1
		h ^= h >> 32
		v = v[8:]
	}
	var w uint64
	for i, c := range v {
		w |= uint64(c) << (8 * i)
	}
	h = (h ^ w) * m1
	h ^= h >> 29
	h *= m2
	h ^= h >> 32
	return h
}

// indexHashFNV is the hash of runs of format 1: FNV-1a 64.
func indexHashFNV(kind byte, v []byte) uint64 {
	const offset64, prime64 = 14695981039346656037, 1099511628211
	h := uint64(offset64)
	h ^= uint64(kind)
	h *= prime64
	for _, c := range v {
		h ^= uint64(c)
		h *= prime64
	}
	return h
}

// openMessageIndex loads the runs and returns the index, its end set to
// where indexing resumes.
func (s *Store) openMessageIndex() (*messageIndex, error) {
	x := &messageIndex{dir: filepath.Join(s.dir, indexDir), lg: s.lg.Named("index"), memSeg: -1, nudge: make(chan struct{}, 1)}
	if err := os.MkdirAll(x.dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	entries, err := os.ReadDir(x.dir)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	var names []string
	for _, e := range entries {
		switch {
		case strings.HasSuffix(e.Name(), ".tmp"):
			_ = os.Remove(filepath.Join(x.dir, e.Name()))
		case strings.HasSuffix(e.Name(), ".run"):
			names = append(names, e.Name())
		}
	}
	sort.Strings(names) // %020d: by from
	start, committed := s.msgLog.Start(), s.committedMessages()
	next, gap := int64(-1), false
	for _, name := range names {
		path := filepath.Join(x.dir, name)
		r, err := openIndexRun(path)
		keep := err == nil && !gap && (next < 0 || r.from == next) && r.to <= committed
		if !keep {
			if err != nil {
				x.lg.Warn("index run damaged: indexing again from the log", zap.String("path", path), zap.Error(err))
			}
			if r != nil {
				r.f.Close()
			}
			_ = os.Remove(path)
			gap = true // every later run goes too
			continue
		}
		if r.to <= start {
			r.f.Close()
			_ = os.Remove(path)
			continue
		}
		x.runs = append(x.runs, r)
		next = r.to
	}
	resume := start
	if n := len(x.runs); n > 0 {
		resume = max(resume, x.runs[n-1].to)
	}
	x.end.Store(resume)
	x.memFrom = resume
	return x, nil
}

func openIndexRun(path string) (*indexRun, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	r := &indexRun{f: f, path: path}
	var h [indexHeaderSize]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		return r, err
	}
	switch string(h[:8]) {
	case indexMagic3:
		r.format = 3
	case indexMagic2:
		r.format, r.shift = 2, indexKeyShift2
	case indexMagic1:
		r.format = 1
	default:
		return r, errors.New("bad magic")
	}
	r.from, r.to = int64(binary.BigEndian.Uint64(h[8:])), int64(binary.BigEndian.Uint64(h[16:]))
	r.count = int(binary.BigEndian.Uint32(h[24:]))
	if r.format == 3 {
		return r, r.openFormat3()
	}
	nf := int(binary.BigEndian.Uint32(h[28:]))
	if nf != (r.count+indexFence-1)/indexFence || r.to < r.from {
		return r, errors.New("bad header")
	}
	fb := make([]byte, nf*8+4)
	if _, err := f.ReadAt(fb, int64(indexHeaderSize+r.count*indexEntrySize)); err != nil {
		return r, err
	}
	crc := crc32.Update(protocol.Checksum(h[:]), crc32.MakeTable(crc32.Castagnoli), fb[:nf*8])
	if crc != binary.BigEndian.Uint32(fb[nf*8:]) {
		return r, errors.New("bad checksum")
	}
	r.fences = make([]uint64, nf)
	for i := range r.fences {
		r.fences[i] = binary.BigEndian.Uint64(fb[i*8:])
	}
	return r, nil
}

// openFormat3 checks a format 3 run's header, table and size and loads its
// table.
func (r *indexRun) openFormat3() error {
	if r.to < r.from || r.to-r.from > indexMaxSpan {
		return errors.New("bad header")
	}
	b := make([]byte, indexDataAt3)
	if _, err := r.f.ReadAt(b, 0); err != nil {
		return err
	}
	table, err := parseBucketTable(b, r.count)
	if err != nil {
		return err
	}
	st, err := r.f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != int64(indexDataAt3+r.count*indexEntrySize3) {
		return fmt.Errorf("size %d for %d entries", st.Size(), r.count)
	}
	r.table = table
	return nil
}

// indexLoop follows the message log into the index: the feed's entries,
// and what the feed lacks read back from the committed log.
func (s *Store) indexLoop() {
	defer s.bg.Done()
	x := s.index
	buf := make([]byte, indexReadBytes)
	var batch, entries []indexEntry
	var chunks []feedChunk
	follow := time.NewTicker(indexFollow)
	defer follow.Stop()
	for {
		progressed := false
		entries, chunks = x.feed.take(entries, chunks)
		fed := len(chunks) > 0
		used, done := 0, 0
		for _, c := range chunks {
			es := entries[used : used+c.n]
			if c.to <= x.end.Load() {
				used, done = used+c.n, done+1
				continue
			}
			if c.from > x.end.Load() {
				// A gap (recovery's tail, a dropped group): read it back.
				var ok bool
				batch, ok = s.indexFromLog(buf, batch, c.from)
				progressed = progressed || ok
				if x.end.Load() < c.from {
					break // not committed yet: wait
				}
				if c.to <= x.end.Load() {
					used, done = used+c.n, done+1
					continue
				}
			}
			from := c.from
			if end := x.end.Load(); from < end { // read back in part
				for len(es) > 0 && es[0].off < end {
					es = es[1:]
				}
				from = end
			}
			x.advanceSplit(s, es, from, c.to)
			used, done = used+c.n, done+1
			progressed = true
		}
		entries = entries[:copy(entries, entries[used:])]
		chunks = chunks[:copy(chunks, chunks[done:])]
		if !fed && len(chunks) == 0 && !x.copying.Load() {
			// Nothing fed: a replica, a store just opened, a quiet one.
			var ok bool
			batch, ok = s.indexFromLog(buf, batch, -1)
			progressed = progressed || ok
		}
		x.retain(s.msgLog.Start())
		s.rebuildDamaged(buf)
		if !progressed {
			x.mu.Lock()
			if len(x.mem) > 0 && time.Since(x.lastAdd) > indexIdleSpill {
				x.spillLocked()
			}
			x.mu.Unlock()
		}
		select {
		case <-s.stop:
			return
		case <-x.nudge:
		case <-follow.C:
		}
	}
}

// indexFromLog reads the committed message log back from the index's end
// into the index, until the end passes until (-1: the committed end). It
// returns batch (scratch, reused) and whether the end moved.
func (s *Store) indexFromLog(buf []byte, batch []indexEntry, until int64) ([]indexEntry, bool) {
	x := s.index
	moved := false
	for until < 0 || x.end.Load() < until {
		from := x.end.Load()
		if from >= s.committedMessages() {
			// Nothing to read: under FlushAsync the feed may have taken
			// the index past the synced end.
			break
		}
		c, err := s.Source().ReadMessageLogInto(buf, from, indexReadBytes)
		if err != nil {
			x.lg.Warn("index: cannot read the message log", zap.Int64("offset", from), zap.Error(err))
			break
		}
		if len(c.Data) == 0 {
			if c.Offset > from { // padding, or retention passed it
				x.advance(s, nil, c.Offset, c.Offset)
				moved = true
			}
			break
		}
		batch = batch[:0]
		off := c.Offset
		for p := 0; p < len(c.Data); {
			kind, payload, n := splitRecord(c.Data[p:])
			if kind == recordMessage {
				if _, _, msg, err := parseRecordPayload(payload); err == nil {
					batch = appendIndexEntries(batch, msg, off+int64(p))
				}
			}
			p += n
		}
		x.advance(s, batch, c.Offset, c.Offset+int64(len(c.Data)))
		moved = true
	}
	return batch, moved
}

// rebuildDamaged builds again, from the message log, every run a lookup
// could not read (indexLoop only): the records in the run's range are read
// back and indexed, and the new run replaces the old one under its name
// (whole or absent). A run that cannot be built is tried again when a
// lookup fails on it again.
func (s *Store) rebuildDamaged(buf []byte) {
	x := s.index
	x.mu.RLock()
	var damaged []*indexRun
	for _, r := range x.runs {
		if r.damaged.Load() {
			damaged = append(damaged, r)
		}
	}
	x.mu.RUnlock()
	for _, old := range damaged {
		old.damaged.Store(false)
		entries, err := s.indexRange(buf, old.from, old.to)
		var r *indexRun
		if err == nil {
			r, _, err = writeIndexRun(x.dir, old.from, old.to, entries, nil)
		}
		if err != nil {
			x.lg.Warn("index: cannot build a damaged run again", zap.String("path", old.path), zap.Error(err))
			continue
		}
		x.mu.Lock()
		i := slices.Index(x.runs, old)
		if i >= 0 {
			x.runs[i] = r
		}
		x.mu.Unlock()
		if i < 0 { // retention dropped it meanwhile
			r.f.Close()
			_ = os.Remove(r.path)
			continue
		}
		old.f.Close()
		x.lg.Warn("index: a run a lookup could not read was built again from the log", zap.String("path", r.path))
	}
}

// indexRange returns the entries of the committed log's records in [from,
// to), read back (buf: scratch).
func (s *Store) indexRange(buf []byte, from, to int64) ([]indexEntry, error) {
	var entries []indexEntry
	for off := from; off < to; {
		c, err := s.Source().ReadMessageLogInto(buf, off, indexReadBytes)
		if err != nil {
			return nil, err
		}
		if len(c.Data) == 0 {
			if c.Offset > off { // padding, or retention passed it
				off = c.Offset
				continue
			}
			return nil, fmt.Errorf("the log ends at %d, before %d", off, to)
		}
		for p := 0; p < len(c.Data) && c.Offset+int64(p) < to; {
			kind, payload, n := splitRecord(c.Data[p:])
			if kind == recordMessage {
				if _, _, msg, err := parseRecordPayload(payload); err == nil {
					entries = appendIndexEntries(entries, msg, c.Offset+int64(p))
				}
			}
			p += n
		}
		off = c.Offset + int64(len(c.Data))
	}
	return entries, nil
}

// appendIndexEntries appends the entries of the message msg stored at off.
func appendIndexEntries(dst []indexEntry, msg []byte, off int64) []indexEntry {
	v, err := protocol.ParseMessageNoCRC(msg)
	if err != nil {
		return dst
	}
	id, key, hasKey := indexHashes(&v)
	dst = append(dst, indexEntry{id, off})
	if hasKey {
		dst = append(dst, indexEntry{key, off})
	}
	return dst
}

// advanceSplit is advance for a fed group's entries (in offset order) of
// the records in [from, to), split where they cross into another segment
// (a group written across a segment's end), so that a run never spans two.
func (x *messageIndex) advanceSplit(s *Store, entries []indexEntry, from, to int64) {
	for {
		_, hi := x.segmentOf(s, from)
		if hi < 0 || to <= hi {
			x.advance(s, entries, from, to)
			return
		}
		k := 0
		for k < len(entries) && entries[k].off < hi {
			k++
		}
		x.advance(s, entries[:k], from, hi)
		entries, from = entries[k:], hi
	}
}

// segmentOf returns the bounds of the message-log segment holding off
// ((-1, -1) when none does), remembering the last one found (indexLoop
// only).
func (x *messageIndex) segmentOf(s *Store, off int64) (lo, hi int64) {
	if off >= x.segLo && off < x.segHi {
		return x.segLo, x.segHi
	}
	for _, sg := range s.msgLog.Segments() {
		if off >= sg.Base && off < sg.Base+sg.Size {
			x.segLo, x.segHi = sg.Base, sg.Base+sg.Size
			return x.segLo, x.segHi
		}
	}
	return -1, -1
}

// advance adds entries of records in [from, to) and moves the end to to,
// spilling first when from lies in another segment than mem's records.
func (x *messageIndex) advance(s *Store, entries []indexEntry, from, to int64) {
	seg, _ := x.segmentOf(s, from)
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.mem) > 0 && (seg != x.memSeg || len(x.mem)+len(entries) > indexRunEntries || to-x.memFrom > indexMaxSpan) {
		x.spillLocked()
	}
	if len(x.mem) == 0 {
		x.memFrom, x.memSeg = from, seg
	}
	if need := len(x.mem) + len(entries); need > cap(x.mem) {
		// Doubled up to a whole run and kept after each spill: grown by
		// append (a quarter at a time at this size), its copies were a
		// tenth of a producing broker's CPU; a store that indexes little
		// keeps a small array.
		n := min(max(2*cap(x.mem), indexMinEntries, need), max(indexRunEntries, need))
		grown := make([]indexEntry, len(x.mem), n)
		copy(grown, x.mem)
		x.mem = grown
	}
	x.mem = append(x.mem, entries...)
	if len(entries) > 0 {
		x.lastAdd = time.Now()
	}
	x.end.Store(to)
	if len(x.mem) == 0 {
		x.memFrom = to
	}
}

// spillLocked writes mem as a run covering [memFrom, end) (x.mu held). A
// run that cannot be written is logged and its entries kept in memory.
func (x *messageIndex) spillLocked() {
	if len(x.mem) == 0 {
		return
	}
	from, to := x.memFrom, x.end.Load()
	r, buf, err := writeIndexRun(x.dir, from, to, x.mem, x.runBuf)
	x.runBuf = buf
	if err != nil {
		x.lg.Warn("index: cannot write a run (its entries stay in memory)", zap.Error(err))
		return
	}
	x.runs = append(x.runs, r)
	x.mem = x.mem[:0]
	x.memFrom, x.memSeg = to, -1
}

// writeIndexRun writes a run of format 3 covering [from, to) with entries
// (in offset order), its file image built in buf, which it returns for the
// next run.
func writeIndexRun(dir string, from, to int64, entries []indexEntry, buf []byte) (*indexRun, []byte, error) {
	buf, table, err := bucketRun(buf, from, to, entries)
	if err != nil {
		return nil, buf, err
	}
	path, err := writeRunFile(dir, from, buf)
	if err != nil {
		return nil, buf, err
	}
	rf, err := os.Open(path)
	if err != nil {
		return nil, buf, err
	}
	return &indexRun{from: from, to: to, count: len(entries), format: 3, table: table, f: rf, path: path}, buf, nil
}

// writeRunFile writes the run image b as the run of from: a temporary file,
// written, fsynced and renamed, then the directory fsynced (whole or
// absent).
func writeRunFile(dir string, from int64, b []byte) (string, error) {
	path := filepath.Join(dir, fmt.Sprintf("%020d.run", from))
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, indexRunFileMode)
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp) // after the rename: no-op
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	return path, err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// retain deletes the runs whose records the message log no longer keeps.
func (x *messageIndex) retain(start int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	keep := x.runs[:0]
	for _, r := range x.runs {
		if r.to <= start {
			r.f.Close()
			_ = os.Remove(r.path)
			continue
		}
		keep = append(keep, r)
	}
	clear(x.runs[len(keep):])
	x.runs = keep
	if len(x.mem) > 0 && x.end.Load() <= start {
		x.mem = x.mem[:0]
	}
	if x.end.Load() < start {
		x.end.Store(start)
		x.memFrom = start
	}
}

// close writes what is in memory as a run and closes the run files.
func (x *messageIndex) close() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.spillLocked()
	for _, r := range x.runs {
		r.f.Close()
	}
	x.runs = nil
}

// candidates returns the offsets of the entries of kind and v, ascending
// (hashed for each run as its format hashes), or an error wrapping
// ErrIndexRead when a run cannot be read (rather than leave its entries
// out).
func (x *messageIndex) candidates(kind byte, v []byte) ([]int64, error) {
	h, h2, h1 := indexHash(kind, v), uint64(0), uint64(0)
	x.mu.RLock()
	defer x.mu.RUnlock()
	var offs []int64
	var err error
	for _, r := range x.runs {
		switch r.format {
		case 3:
			offs, err = r.findBucket(h, offs)
		case 2:
			if h2 == 0 {
				h2 = indexHash2(kind, v)
			}
			offs, err = r.find(h2, offs)
		default:
			if h1 == 0 {
				h1 = indexHashFNV(kind, v)
			}
			offs, err = r.find(h1, offs)
		}
		if err != nil {
			r.damaged.Store(true)
			select {
			case x.nudge <- struct{}{}:
			default:
			}
			return nil, fmt.Errorf("%w: %s: %w", ErrIndexRead, r.path, err)
		}
	}
	for _, e := range x.mem {
		if e.hash == h {
			offs = append(offs, e.off)
		}
	}
	slices.Sort(offs)
	return slices.Compact(offs), nil
}

// findBucket appends the offsets of the entries of a format 3 run r whose
// hash may be h (bucket and fragment equal): h's bucket, read with one
// pread and checked.
func (r *indexRun) findBucket(h uint64, dst []int64) ([]int64, error) {
	lo, hi, crc := r.table.bucket(indexBucket(h))
	if hi <= lo {
		return dst, nil
	}
	buf := make([]byte, int(hi-lo)*indexEntrySize3)
	if _, err := r.f.ReadAt(buf, int64(indexDataAt3)+int64(lo)*indexEntrySize3); err != nil {
		return dst, err // its size was checked at open: it shrank since, or the disk failed
	}
	if protocol.Checksum(buf) != crc {
		return dst, errBucketChecksum
	}
	frag := indexFrag(h)
	for p := 0; p < len(buf); p += indexEntrySize3 {
		if binary.BigEndian.Uint32(buf[p:]) == frag {
			dst = append(dst, r.from+int64(binary.BigEndian.Uint32(buf[p+4:])))
		}
	}
	return dst, nil
}

// find appends the offsets of the entries of a run r of format 1 or 2 with
// hash h: the entries between the fences around h, read with one pread.
func (r *indexRun) find(h uint64, dst []int64) ([]int64, error) {
	if r.count == 0 {
		return dst, nil
	}
	// Runs are in the order of hash >> r.shift (the key k). The first
	// fence whose key is > k bounds the block; the block starts at the
	// fence before the first fence whose key is >= k (equal keys may begin
	// in it). Entries of k are checked for the whole hash.
	k := h >> r.shift
	lo := sort.Search(len(r.fences), func(i int) bool { return r.fences[i]>>r.shift >= k })
	hi := sort.Search(len(r.fences), func(i int) bool { return r.fences[i]>>r.shift > k })
	first := max(lo-1, 0) * indexFence
	last := min(hi*indexFence, r.count)
	if last <= first {
		return dst, nil
	}
	b := make([]byte, (last-first)*indexEntrySize)
	if _, err := r.f.ReadAt(b, int64(indexHeaderSize+first*indexEntrySize)); err != nil {
		return dst, err // the entries lie before the fences: an EOF is a cut file
	}
	for p := 0; p+indexEntrySize <= len(b); p += indexEntrySize {
		eh := binary.BigEndian.Uint64(b[p:])
		if eh == h {
			dst = append(dst, int64(binary.BigEndian.Uint64(b[p+8:])))
		} else if eh>>r.shift > k {
			break
		}
	}
	return dst, nil
}

// find returns the stored messages whose id (indexKindID) or key
// (indexKindKey) is v, oldest first, at most indexMaxFound (Lookup.ByID,
// Lookup.ByKey).
func (s *Store) find(kind byte, v string) ([]Found, error) {
	x := s.index
	if x == nil {
		return nil, ErrNoIndex
	}
	target := s.committedMessages()
	if x.copying.Load() {
		return s.findCopied(kind, v, target)
	}
	if x.end.Load() < target {
		select {
		case x.nudge <- struct{}{}:
		default:
		}
	}
	for wait := time.Now().Add(indexCatchUp); x.end.Load() < target && time.Now().Before(wait); {
		time.Sleep(time.Millisecond)
	}
	if end := x.end.Load(); end < target && end < x.catchUpTo.Load() {
		return nil, fmt.Errorf("%w: indexed to %d of %d", ErrIndexBehind, end, target)
	}
	offs, err := x.candidates(kind, []byte(v))
	if err != nil {
		return nil, err
	}
	return s.matchFound(kind, v, offs), nil
}

// matchFound reads the records at offs and returns those of the message
// whose id (kind indexKindID) or key is v.
func (s *Store) matchFound(kind byte, v string, offs []int64) []Found {
	var out []Found
	for _, off := range offs {
		f, ok := s.readFound(off)
		if !ok {
			continue
		}
		pm, err := protocol.ParseMessage(f.Message)
		if err != nil {
			continue
		}
		match := false
		if kind == indexKindID {
			match = string(pm.ID) == v
		} else if pm.PropertyCount() > 0 {
			pm.Properties(func(k, val []byte) bool {
				if string(k) == protocol.PropKey {
					match = string(val) == v
					return false
				}
				return true
			})
		}
		if match {
			out = append(out, f)
			if len(out) == indexMaxFound {
				break
			}
		}
	}
	return out
}

// readFound reads and checks the message record at off.
func (s *Store) readFound(off int64) (Found, bool) {
	c, err := s.Source().ReadMessageLog(off, segment.HeaderSize)
	if err != nil || c.Offset != off || len(c.Data) == 0 {
		return Found{}, false
	}
	kind, payload, _, err := segment.ParseRecord(c.Data)
	if err != nil || kind != recordMessage {
		return Found{}, false
	}
	seq, ts, msg, err := parseRecordPayload(payload)
	if err != nil {
		return Found{}, false
	}
	v, err := protocol.ParseMessageNoCRC(msg)
	if err != nil {
		return Found{}, false
	}
	return Found{Offset: off, Subject: string(v.Subject), Seq: seq, Stored: time.UnixMilli(ts), Message: slices.Clone(msg)}, true
}

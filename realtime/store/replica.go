package store

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/segment"
	"go.uber.org/zap"
)

// Replica is a slave's side of replication: the master's records are
// written through it (see "Replication" in doc.go). Store.Replica returns it;
// its methods fail with ErrNotReplica on a store that is not (or no longer)
// a replica where they would change it.
type Replica struct{ s *Store }

// Replica returns the store's replication sink.
func (s *Store) Replica() *Replica { return &s.replicaSide }

// Ends returns a replica's message-log ends: written is where the
// next chunk must start (the offset to ask the master for), durable the end
// on disk (the slave's acknowledgement). Both may lie past the committed
// end (CommittedEnds): a tentative tail copied before the master made it
// durable, written and synced but not indexed until the master's committed
// end passes it (see ReplicateMessages).
func (r *Replica) Ends() (written, durable int64) {
	s := r.s
	written = s.msgLog.End()
	return written, min(written, max(s.msgLog.Synced(), s.goodEnd.Load()))
}

// ReplicateMessages writes a chunk of the master's message log at the same
// offsets in this store's message log (a store opened with Options.Replica),
// fdatasyncs it and indexes what the master has made durable (up to the
// chunk's End) exactly as recovery does, so the subjects' consume logs are
// derived, not copied: WriteMessages, SyncMessages and IndexMessages in a
// row. Records past End are the master's tentative tail:
// written and synced here (so the slave can acknowledge them) but indexed
// only once a later chunk's End passes them, so a cut of them
// (CutTail) touches the message log alone. The store keeps such a
// chunk's Data (it does not copy it) and indexes the records from it, so
// the caller must not change Data after the call. When the master no
// longer keeps what this store lacks (Offset is the master's Start and
// above this store's end), the log restarts at Offset and the lost
// sequences become holes; such a chunk must not reach past End. One
// goroutine replicates.
func (r *Replica) ReplicateMessages(c LogChunk) error {
	if err := r.WriteMessages(c); err != nil {
		return err
	}
	if err := r.SyncMessages(); err != nil {
		return err
	}
	return r.IndexMessages()
}

// WriteMessages is ReplicateMessages without the fdatasync and the
// indexing: it checks every record's CRC and writes the chunk (to the page
// cache), keeps its Data for IndexMessages and notes its End, the
// master's committed end. A slave writes each chunk as it arrives while
// SyncMessages runs on another goroutine, so a fdatasync covers every
// chunk written before it starts (see "Replication" in doc.go). One
// goroutine writes; a chunk at the master's start (a restart past what
// the copy lacks) is synced and indexed at once.
func (r *Replica) WriteMessages(c LogChunk) error {
	s := r.s
	unlock, err := s.lockReplica()
	if err != nil {
		return err
	}
	defer unlock()
	end := s.msgLog.End()
	if c.Offset < end {
		return fmt.Errorf("%w: message chunk at %d, this copy ends at %d", ErrReplicaMismatch, c.Offset, end)
	}
	s.repl.committed = c.End
	if len(c.Data) == 0 {
		return nil
	}
	jumped := false
	if c.Offset > end && c.Offset == c.Start {
		if c.Offset+int64(len(c.Data)) > c.End {
			return fmt.Errorf("%w: message chunk at the master's start %d reaches past its committed end %d", ErrBadChunk, c.Offset, c.End)
		}
		// The master deleted what this copy lacks: start over at its start.
		if err := s.msgLog.Reset(0); err != nil {
			return fmt.Errorf("%w: %w", ErrIO, err)
		}
		if err := s.msgLog.Reset(c.Offset); err != nil {
			return fmt.Errorf("%w: %w", ErrIO, err)
		}
		s.lg.Warn("message log restarts at the master's first kept offset", zap.Int64("from", end), zap.Int64("to", c.Offset))
		s.repl.dropTail()
		jumped = true
	}
	// Every record's CRC is checked, then the chunk is written as it came
	// (one run of records, not copied): at c.Offset here too, or the
	// copies differ.
	first, n := 0, 0
	for p := 0; p < len(c.Data); n++ {
		_, _, size, err := segment.ParseRecord(c.Data[p:]) // checks its CRC
		if err != nil {
			return fmt.Errorf("%w: message chunk at %d: %w", ErrBadChunk, c.Offset+int64(p), err)
		}
		if p == 0 {
			first = size
		}
		p += size
	}
	if s.repl.batch == nil {
		s.repl.batch = s.msgLog.NewBatch()
	} else {
		s.repl.batch.Reset()
	}
	batch := s.repl.batch
	off, err := batch.AppendRun(c.Data, first, n)
	if errors.Is(err, segment.ErrSpansSegments) {
		return fmt.Errorf("%w: master chunk at %d: %w", ErrReplicaMismatch, c.Offset, err)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadChunk, err)
	}
	if off != c.Offset {
		return fmt.Errorf("%w: master record at %d would land at %d here", ErrReplicaMismatch, c.Offset, off)
	}
	err = s.msgLog.Write(batch)
	bend := batch.End()
	batch.Reset() // no reference to c.Data past this call
	if err != nil {
		return s.replicaWriteFailed(err)
	}
	if jumped {
		if err := s.msgLog.Sync(); err != nil {
			return s.replicaWriteFailed(err)
		}
		s.stats.syncs.Add(1)
		s.goodEnd.Store(c.Offset)
		return s.indexReplicated(c, bend, true)
	}
	s.repl.keepTail(c.Offset, c.Data, s.goodEnd.Load())
	return nil
}

// SyncMessages fdatasyncs the chunks WriteMessages wrote (none: no
// fdatasync). The durable end (Ends) then covers every chunk written
// before it started. It may run while WriteMessages writes the next
// chunks, on another goroutine.
func (r *Replica) SyncMessages() error {
	return r.s.syncReplica(r.s.msgLog.Sync)
}

// syncReplica runs sync, one fdatasync of the copy's message log, unless
// everything written is durable already; a failure poisons the copy as a
// failed write does.
func (s *Store) syncReplica(sync func() error) error {
	if !s.replica.Load() {
		return ErrNotReplica
	}
	if s.isClosed() {
		return ErrClosed
	}
	if s.msgLog.Synced() >= s.msgLog.End() {
		return nil
	}
	if err := sync(); err != nil {
		s.replMu.Lock()
		defer s.replMu.Unlock()
		return s.replicaWriteFailed(err)
	}
	s.stats.syncs.Add(1)
	return nil
}

// ReplicaSyncer fdatasyncs a copy's written chunks as SyncMessages does,
// through descriptors of its own (segment.Syncer), so that two may run at
// once: one starting while the other still waits for the disk (as the
// master's sync workers do, groupcommit.go). A ReplicaSyncer is used by
// one goroutine at a time; Close releases its descriptors.
type ReplicaSyncer struct {
	s  *Store
	sy *segment.Syncer
}

// NewSyncer returns a ReplicaSyncer of the copy's message log.
func (r *Replica) NewSyncer() *ReplicaSyncer {
	return &ReplicaSyncer{s: r.s, sy: r.s.msgLog.NewSyncer()}
}

// Sync is SyncMessages through rs's descriptors: once it returns, the
// durable end (Ends) covers every chunk written before it started.
func (rs *ReplicaSyncer) Sync() error {
	return rs.s.syncReplica(func() error {
		_, err := rs.sy.Sync()
		return err
	})
}

// Close releases rs's descriptors.
func (rs *ReplicaSyncer) Close() { rs.sy.Close() }

// IndexMessages indexes the written records that are durable here and
// that the master has made durable (the End of the latest chunk
// WriteMessages took), from the chunks it keeps.
func (r *Replica) IndexMessages() error {
	s := r.s
	unlock, err := s.lockReplica()
	if err != nil {
		return err
	}
	defer unlock()
	return s.indexTail(min(s.repl.committed, s.msgLog.Synced()))
}

// Holds reports whether the store still keeps bytes of buf's
// backing array: the chunks of a tentative tail (ReplicateMessages keeps
// their Data until it indexes them). A caller that reuses its chunk
// buffers reuses only those the store no longer holds.
func (r *Replica) Holds(buf []byte) bool {
	s := r.s
	if cap(buf) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	hi := lo + uintptr(cap(buf))
	s.replMu.Lock()
	defer s.replMu.Unlock()
	for _, c := range s.repl.tail {
		if len(c.Data) == 0 {
			continue
		}
		p := uintptr(unsafe.Pointer(unsafe.SliceData(c.Data)))
		if p >= lo && p < hi {
			return true
		}
	}
	return false
}

// replication is what a replica keeps between its steps (under replMu).
type replication struct {
	batch    *segment.Batch // ReplicateMessages' batch, reused
	indexBuf []byte         // indexTail's read buffer, reused
	// indexEntries: indexReplicated's message-index entries, reused.
	indexEntries []indexEntry
	// tail holds the chunks written past the indexed end (goodEnd) as
	// ReplicateMessages received them, oldest first, so indexTail indexes
	// them from memory instead of reading back what was just written.
	// Each is whole records at its offset, byte for byte the log's; two
	// may be apart (the padding at a segment's end, or a chunk not kept),
	// and indexTail reads back what lies between. tailBytes is their size.
	tail      []LogChunk
	tailBytes int
	// committed is the master's committed end as the latest chunk
	// WriteMessages took told it: IndexMessages indexes up to it.
	committed int64
}

// maxKeptTail bounds the tentative tail kept in memory: past it, chunks
// are indexed by reading them back (a master whose fdatasync stalls while
// it goes on writing).
const maxKeptTail = 16 << 20

// keepTail keeps a written chunk's records for indexTail, first dropping
// the kept ones wholly below the indexed end.
func (r *replication) keepTail(off int64, data []byte, indexed int64) {
	r.trimBelow(indexed)
	if len(data) == 0 || r.tailBytes+len(data) > maxKeptTail {
		return
	}
	r.tail = append(r.tail, LogChunk{Offset: off, Data: data})
	r.tailBytes += len(data)
}

// trimBelow drops the kept chunks that end at or below off.
func (r *replication) trimBelow(off int64) {
	n := 0
	for n < len(r.tail) && r.tail[n].Offset+int64(len(r.tail[n].Data)) <= off {
		r.tailBytes -= len(r.tail[n].Data)
		n++
	}
	if n > 0 {
		clear(r.tail[:n])
		r.tail = append(r.tail[:0], r.tail[n:]...)
	}
}

// cutTail forgets what was kept at or past off (the log was cut back to
// it).
func (r *replication) cutTail(off int64) {
	for i := len(r.tail) - 1; i >= 0; i-- {
		c := &r.tail[i]
		switch {
		case c.Offset >= off:
			r.tailBytes -= len(c.Data)
			r.tail[i] = LogChunk{}
			r.tail = r.tail[:i]
		case c.Offset+int64(len(c.Data)) > off:
			r.tailBytes -= int(c.Offset + int64(len(c.Data)) - off)
			c.Data = c.Data[:off-c.Offset]
		}
	}
}

// dropTail forgets every kept chunk.
func (r *replication) dropTail() {
	clear(r.tail)
	r.tail, r.tailBytes = r.tail[:0], 0
}

// lockReplica takes replMu for a replication step: it fails with
// ErrNotReplica on a store that is not a replica and ErrClosed on a closed
// one.
func (s *Store) lockReplica() (unlock func(), err error) {
	if !s.replica.Load() {
		return nil, ErrNotReplica
	}
	s.replMu.Lock()
	if s.isClosed() {
		s.replMu.Unlock()
		return nil, ErrClosed
	}
	return s.replMu.Unlock, nil
}

// indexTail indexes the written tail up to upTo (the master's committed
// end; a record boundary of both copies): from the chunks kept as received
// where they cover it, else reading it back from the log. replMu must be
// held.
func (s *Store) indexTail(upTo int64) error {
	upTo = min(upTo, s.msgLog.End())
	r := &s.repl
	for from := s.goodEnd.Load(); from < upTo; from = s.goodEnd.Load() {
		r.trimBelow(from)
		if len(r.tail) > 0 && r.tail[0].Offset == from {
			k := &r.tail[0]
			n, err := wholeRecords(k.Data, upTo-from)
			if err != nil {
				return fmt.Errorf("%w: the master's committed end %d: %w", ErrReplicaMismatch, upTo, err)
			}
			c := LogChunk{Offset: from, Data: k.Data[:n]}
			k.Offset, k.Data = from+int64(n), k.Data[n:]
			r.tailBytes -= n
			if err := s.indexReplicated(c, from+int64(n), false); err != nil {
				return err
			}
			continue
		}
		// Read back up to the next kept chunk (a kept chunk that starts
		// below from is not trusted to hold a record boundary there).
		bound := upTo
		if len(r.tail) > 0 && r.tail[0].Offset > from {
			bound = min(bound, r.tail[0].Offset)
		}
		c, err := readChunk(s.msgLog, bound, from, 1<<20, r.indexBuf)
		if err != nil {
			return err
		}
		if cap(c.Data) > cap(r.indexBuf) {
			r.indexBuf = c.Data[:0] // kept for the next tail: a chunk is up to 1 MiB
		}
		end := c.Offset + int64(len(c.Data))
		if len(c.Data) == 0 {
			end = bound // padding up to bound
		}
		if err := s.indexReplicated(c, end, false); err != nil {
			return err
		}
	}
	r.trimBelow(s.goodEnd.Load())
	if len(r.tail) == 0 && cap(r.tail) > 64 {
		r.tail = nil
	}
	return nil
}

// wholeRecords returns the size of the whole records at the start of data
// (records already checked) that end at or below limit; a first record
// that ends past limit fails: limit is not a record boundary.
func wholeRecords(data []byte, limit int64) (int, error) {
	if limit >= int64(len(data)) {
		return len(data), nil // all of them: no walk through their headers
	}
	n := 0
	for n+segment.HeaderSize <= len(data) {
		size, err := recordSize(data[n:])
		if err != nil {
			return 0, fmt.Errorf("no record at %d of a kept chunk: %w", n, err)
		}
		if int64(n)+size > limit {
			break
		}
		n += int(size)
	}
	if n == 0 {
		return 0, fmt.Errorf("no record ends at or below %d bytes on", limit)
	}
	return n, nil
}

// CutTail cuts a replica's message log back to off, which must not
// lie below what it has indexed (its committed end): the master's log was
// cut back past a tentative tail this copy holds (MessageCuts), and its
// next records land at the same offsets. It fails with ErrReplicaMismatch
// when off lies below the indexed end (the copy must be cut back with
// Truncate, closed).
func (r *Replica) CutTail(off int64) error {
	s := r.s
	unlock, err := s.lockReplica()
	if err != nil {
		return err
	}
	defer unlock()
	if g := s.goodEnd.Load(); off < g {
		return fmt.Errorf("%w: cut back to %d, below the indexed end %d", ErrReplicaMismatch, off, g)
	}
	end := s.msgLog.End()
	if off >= end {
		return nil
	}
	s.repl.cutTail(off)
	if err := s.msgLog.Reset(off); err != nil {
		return fmt.Errorf("%w: %w", ErrIO, err)
	}
	s.lg.Warn("tentative message-log tail cut back: the master cut its log", zap.Int64("from", end), zap.Int64("to", off))
	return nil
}

// replicaWriteFailed cuts the message log back to its last written chunk's
// end (the start of the failed one).
func (s *Store) replicaWriteFailed(err error) error {
	back := max(s.msgLog.Synced(), s.goodEnd.Load())
	s.repl.cutTail(back)
	if rerr := s.msgLog.Reset(back); rerr != nil {
		s.lg.Error("message log reset after a failed replicated write failed", zap.Error(rerr))
	}
	return fmt.Errorf("%w: %w", ErrIO, err)
}

// indexReplicated adds consume-log entries for the records of a written
// chunk (as recoverMessages does) and publishes them.
func (s *Store) indexReplicated(c LogChunk, end int64, jumped bool) error {
	type touched struct {
		sj    *subject
		bytes int64
		first int64 // the chunk's first sequence of the subject
	}
	var ts []touched
	// ts's index of a subject: the last one's (a chunk is mostly runs of
	// one subject), else the map (made once a second subject shows).
	var idx map[*subject]int
	lastSj, lastI := (*subject)(nil), -1
	n := int64(0)
	// Runs of one subject take its lock once (as the appender's do).
	var run *subject
	endRun := func() error {
		if run == nil {
			return nil
		}
		var err error
		if len(run.pending) >= pendingFlushBytes {
			err = run.flushLocked()
		}
		run.mu.Unlock()
		run = nil
		return err
	}
	defer endRun()
	es := s.repl.indexEntries[:0] // the message index's entries (feedRun)
	// A copied index (indexcopy.go) takes its master's runs instead.
	feed := s.index != nil && !s.index.copying.Load()
	for p := 0; p < len(c.Data); {
		off := c.Offset + int64(p)
		kind, payload, size := splitRecord(c.Data[p:]) // validated before the write
		p += size
		if kind != recordMessage {
			s.lg.Error("unknown message-log record kind replicated; skipped", zap.Int64("offset", off), zap.Uint8("kind", kind))
			continue
		}
		seq, at, msg, err := parseRecordPayload(payload)
		var v protocol.View
		if err == nil {
			v, err = protocol.ParseMessageNoCRC(msg)
		}
		if err != nil {
			s.lg.Error("replicated message record does not parse; skipped", zap.Int64("offset", off), zap.Error(err))
			continue
		}
		sj := run
		if sj == nil || string(v.Subject) != sj.name {
			if err := endRun(); err != nil {
				return err
			}
			sj = s.lookupSubject(v.Subject) // no allocation for a known subject
			if sj == nil {
				if sj, err = s.subjectFor(string(v.Subject), true); err != nil {
					return fmt.Errorf("%w: %w", ErrIO, err)
				}
			}
		}
		if seq < sj.next {
			continue // indexed already
		}
		if sj.next < seq {
			if err := endRun(); err != nil {
				return err
			}
			for sj.next < seq {
				sj.addHole()
				sj.next++
			}
		}
		if run == nil {
			run = sj
			run.mu.Lock()
		}
		if feed {
			id, key, hasKey := indexHashes(&v)
			es = append(es, indexEntry{id, off})
			if hasKey {
				es = append(es, indexEntry{key, off})
			}
		}
		e := entry{offset: off, size: uint32(size), timestamp: at, deliverAt: v.DeliverAtMillis}
		v.Tags(func(t []byte) bool { e.bloom |= tagBloom(t); return true })
		sj.addEntryLocked(&e)
		sj.next++
		if sj != lastSj {
			i, ok := idx[sj]
			if !ok {
				if len(ts) > 0 && idx == nil {
					idx = make(map[*subject]int)
					for j, t := range ts {
						idx[t.sj] = j
					}
				}
				i = len(ts)
				if idx != nil {
					idx[sj] = i
				}
				ts = append(ts, touched{sj: sj, first: seq})
			}
			lastSj, lastI = sj, i
		}
		ts[lastI].bytes += int64(size)
		s.replTs = max(s.replTs, at)
		n++
	}
	if err := endRun(); err != nil {
		return err
	}
	for _, t := range ts {
		t.sj.setVisible(t.sj.next, t.bytes)
	}
	if feed {
		// From the indexed end: what lies before c.Offset is padding at a
		// segment's end (or, after a jump, gone).
		from := c.Offset
		if !jumped {
			from = min(from, s.goodEnd.Load())
		}
		s.index.feedRun(from, end, es)
		s.repl.indexEntries = es[:0]
	}
	s.goodEnd.Store(end)
	s.lastPublishedTs.Store(s.replTs)
	s.stats.appended.Add(n)
	if jumped {
		// Everything below a subject's first record after the jump is
		// gone (old entries or holes).
		for _, t := range ts {
			t.sj.mu.Lock()
			if t.first > t.sj.min {
				t.sj.min = t.first
				t.sj.bytes = t.bytes
			}
			t.sj.mu.Unlock()
			if _, err := t.sj.log.DeleteBefore(t.first); err != nil {
				return fmt.Errorf("%w: %w", ErrIO, err)
			}
		}
		if err := s.raiseMins(c.Offset); err != nil {
			return err
		}
	}
	if s.opts.OnAppend != nil {
		for _, t := range ts {
			s.opts.OnAppend(t.sj.name, t.sj.next)
		}
	}
	s.signalCommit()
	return nil
}

// ReplicateActions writes a chunk of the master's action log at the same
// offsets in this store's action log and applies every action to its group
// as recovery does (pull logs, cursors, acks, returned queues), then syncs
// the log. A chunk that starts past this copy's end at the master's Start
// fails with ErrReplicaGap: the master no longer has actions this copy
// lacks, and only a fresh copy can follow it (see doc.go).
func (r *Replica) ReplicateActions(c LogChunk) error {
	s := r.s
	unlock, err := s.lockReplica()
	if err != nil {
		return err
	}
	defer unlock()
	end := s.actions.end()
	if c.Offset < end {
		return fmt.Errorf("%w: action chunk at %d, this copy ends at %d", ErrReplicaMismatch, c.Offset, end)
	}
	if len(c.Data) == 0 {
		return nil
	}
	if c.Offset > end && c.Offset == c.Start {
		return fmt.Errorf("%w: the master's action log starts at %d, this copy ends at %d", ErrReplicaGap, c.Start, end)
	}
	// Check the whole chunk first (records and where they would land):
	// nothing of a bad chunk is appended. The trial batch starts where the
	// action batch does unless a failed flush still holds records.
	trial := s.actLog.NewBatch()
	placed := trial.End() == end
	for p := 0; p < len(c.Data); {
		kind, payload, size, err := segment.ParseRecord(c.Data[p:])
		if err != nil {
			return fmt.Errorf("%w: action chunk at %d: %w", ErrBadChunk, c.Offset+int64(p), err)
		}
		if placed {
			off, err := trial.Append(kind, payload, nil)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrBadChunk, err)
			}
			if want := c.Offset + int64(p); off != want {
				return fmt.Errorf("%w: master action at %d would land at %d here", ErrReplicaMismatch, want, off)
			}
		}
		p += size
	}
	for p := 0; p < len(c.Data); {
		kind, payload, size, _ := segment.ParseRecord(c.Data[p:])
		if err := s.replicateAction(c.Offset+int64(p), kind, payload); err != nil {
			return err
		}
		p += size
	}
	if err := s.actions.flush(); err != nil {
		return err
	}
	return nil
}

// replicateAction appends one action and applies it under its group's lock,
// as a live action is (so a checkpoint's action offset never runs ahead of
// the groups it records).
func (s *Store) replicateAction(want int64, kind uint8, payload []byte) error {
	a, derr := decodeAction(kind, payload)
	var g *group
	if derr == nil {
		key := groupKey{subject: a.subject, group: a.group, broadcast: a.broadcast}
		s.groupsMu.Lock()
		g = s.groups[key]
		if g == nil {
			sj, err := s.subjectFor(a.subject, true)
			if err != nil {
				s.groupsMu.Unlock()
				return fmt.Errorf("%w: %w", ErrIO, err)
			}
			g = s.newGroup(key, sj)
			s.groups[key] = g
		}
		s.groupsMu.Unlock()
		g.mu.Lock()
		defer g.mu.Unlock()
	} else {
		s.lg.Error("replicated action does not parse; kept but not applied", zap.Int64("offset", want), zap.Error(derr))
	}
	off, err := s.actions.appendAt(kind, payload)
	if err != nil {
		return fmt.Errorf("%w: action log: %w", ErrIO, err)
	}
	if off != want {
		return fmt.Errorf("%w: master action at %d would land at %d here", ErrReplicaMismatch, want, off)
	}
	if g == nil || a.version <= g.version {
		return nil
	}
	if err := g.apply(s, &a); err != nil {
		return err
	}
	if a.kind == actPull && !g.key.broadcast && len(a.runs) > 0 {
		if err := g.consumers[a.consumer].writePullLog(a.seq, expandRuns(a.runs)); err != nil {
			return err
		}
	}
	return nil
}

// Active reports whether the store is a replica (opened with
// Options.Replica and not promoted).
func (r *Replica) Active() bool { return r.s.replica.Load() }

// errIfReplica refuses changes from clients on a replica.
func (s *Store) errIfReplica() error {
	if s.replica.Load() {
		return ErrReplica
	}
	return nil
}

// Promote turns a replica into a master's store (failover): replication
// stops and appends, pulls, acks and consumer changes are taken from then
// on. Its logs continue exactly where the copy ends (its tentative tail
// indexed first), so the next record and
// action land at the offsets the old master's would have, and each subject
// continues its sequence. The appender takes over the last append time, so
// append times never go back. Promoting a store that is not a replica
// fails with ErrNotReplica.
func (r *Replica) Promote() error {
	s := r.s
	s.replMu.Lock()
	defer s.replMu.Unlock()
	if !s.replica.Load() {
		return ErrNotReplica
	}
	if s.isClosed() {
		return ErrClosed
	}
	// The tentative tail is the master's too (the slave acknowledged it,
	// so the old master may have answered its senders): it is the new
	// master's from now on. What was written and not yet synced
	// (WriteMessages) is synced first: indexed records are durable.
	if s.msgLog.Synced() < s.msgLog.End() {
		if err := s.msgLog.Sync(); err != nil {
			return fmt.Errorf("%w: %w", ErrIO, err)
		}
	}
	if err := s.indexTail(s.msgLog.End()); err != nil {
		return err
	}
	s.repl.dropTail()
	if x := s.index; x != nil {
		// The index indexes the log past its last copied run from now on
		// (indexLoop reads it back); a lookup until it is there says it
		// is catching up (indexcopy.go).
		x.stopCopying(s.goodEnd.Load())
	}
	// The appender reads lastTs and the subjects' next only after a send
	// that follows the store of replica below (atomic, then the append
	// channel), so these writes happen before its reads.
	s.lastTs = max(s.lastTs, s.replTs)
	s.replica.Store(false)
	s.lg.Info("promoted: the replica takes writes", zap.Int64("message_end", s.goodEnd.Load()), zap.Int64("action_end", s.actions.end()))
	return nil
}

package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/segment"
	"go.uber.org/zap"
)

// Store is the realtime broker's storage: the message log, the consume logs,
// the pull logs, the action log and checkpoints under one directory. See the
// package documentation.
type Store struct {
	dir  string
	opts Options
	lg   *zap.Logger

	lock    *fsutil.DirLock
	pool    *segment.FilePool
	msgLog  *segment.Log
	actLog  *segment.Log
	actions *actionLog

	subjectsMu sync.RWMutex
	subjects   map[string]*subject
	subjectTab subjectTable // the subjects by name, read without a lock
	// pendingBuffers are the subjects' consume-log buffers.
	pendingBuffers *pendingBuffers
	// watchedNames are the subjects Watch was called for (subjectsMu).
	watchedNames map[string]bool

	groupsMu sync.RWMutex
	groups   map[groupKey]*group

	appendCh    chan *appendReq
	direct      directAppend // the writer's lock and state (direct.go)
	commits     groupCommit  // FlushSync: written groups on their way to the sync workers
	inflight    sync.WaitGroup
	goodEnd     atomic.Int64 // end of the last published group
	writeFailed atomic.Bool
	lastTs      int64 // appender: last append timestamp
	// lastPublishedTs is lastTs as of the last published group (checkpoints).
	lastPublishedTs atomic.Int64

	closeMu   sync.RWMutex
	closed    bool
	closedFlg atomic.Bool
	closing   atomic.Bool
	stop      chan struct{}
	wg        sync.WaitGroup // appendLoop, the syncLoops
	bg        sync.WaitGroup // the other loops
	index     *messageIndex  // nil with Options.NoMessageIndex (msgindex.go)

	ckptMu sync.Mutex
	retMu  sync.Mutex

	// Replication (replica.go): commit notifications, the replicating
	// goroutine's lock and its last append time, and the ends recovery
	// found (committed: they were on disk when the store opened).
	commit                           commitSignal
	replica                          atomic.Bool // Options.Replica until Promote
	replMu                           sync.Mutex
	replTs                           int64
	repl                             replication // replica.go (replMu)
	source                           Source      // Source()
	replicaSide                      Replica     // Replica()
	recoveredMsgEnd, recoveredActEnd int64

	stats counters
	open  OpenReport
}

// OpenReport says what Open found and did.
type OpenReport struct {
	// MessagesReplayed and ActionsReplayed count records read after the
	// checkpoint.
	MessagesReplayed, ActionsReplayed int64
	// TornMessageTail and TornActionTail are the offsets where a torn tail was
	// cut off, or -1.
	TornMessageTail, TornActionTail int64
	// Corrupt lists damaged ranges skipped in the middle of the message log
	// and action log (only with Options.SkipCorrupt).
	Corrupt []segment.Range
	// Holes counts consume-log sequences whose message was lost to a skipped
	// corrupt range.
	Holes int64
	// Duration is how long Open took.
	Duration time.Duration
}

// Open opens (creating if needed) the store in dir, recovers it and starts
// its loops. lg may be nil.
func Open(dir string, opts Options, lg *zap.Logger) (*Store, error) {
	started := time.Now()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if lg == nil {
		lg = zap.NewNop()
	}
	if err := fsutil.MkdirPrivate(opts.FS, dir); err != nil {
		return nil, fmt.Errorf("store: create %s: %w", dir, err)
	}
	lock, err := fsutil.LockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	s := &Store{
		dir:            dir,
		opts:           opts,
		lg:             lg.Named("store"),
		lock:           lock,
		pool:           segment.NewFilePool(opts.FS, opts.MaxOpenFiles),
		subjects:       map[string]*subject{},
		groups:         map[groupKey]*group{},
		pendingBuffers: newPendingBuffers(),
		appendCh:       make(chan *appendReq, 1024),
		stop:           make(chan struct{}),
		open:           OpenReport{TornMessageTail: -1, TornActionTail: -1},
	}
	if err := s.recover(); err != nil {
		s.closeFiles()
		return nil, err
	}
	s.replica.Store(opts.Replica)
	s.source, s.replicaSide = Source{s}, Replica{s}
	s.open.Duration = time.Since(started)
	s.lg.Info("store opened", zap.String("dir", dir), zap.Int("subjects", len(s.subjects)), zap.Int("groups", len(s.groups)),
		zap.Int64("messages_replayed", s.open.MessagesReplayed), zap.Int64("actions_replayed", s.open.ActionsReplayed),
		zap.Duration("took", s.open.Duration))
	s.commits.wake = sync.NewCond(&s.commits.mu)
	s.wg.Add(1)
	go s.appendLoop()
	if opts.Flush == FlushSync {
		for range syncWorkers {
			s.wg.Add(1)
			go s.syncLoop(s.msgLog.NewSyncer())
		}
		if opts.ZeroFillAhead > 0 {
			s.bg.Add(1)
			go s.zeroFillLoop()
		}
	} else {
		s.bg.Add(1)
		go s.flushLoop()
	}
	s.bg.Add(1)
	go s.actionFlushLoop()
	if opts.PageCacheWindow > 0 || (opts.Replica && opts.ReplicaPageCacheWindow > 0) {
		s.bg.Add(1)
		go s.pageCacheLoop()
	}
	if opts.CheckpointInterval > 0 {
		s.bg.Add(1)
		go s.checkpointLoop()
	}
	if opts.RetentionInterval > 0 {
		s.bg.Add(1)
		go s.retentionLoop()
	}
	if !opts.NoMessageIndex {
		if s.index, err = s.openMessageIndex(); err != nil {
			s.Close()
			return nil, err
		}
		s.index.copying.Store(opts.Replica && opts.CopyMessageIndex)
		s.bg.Add(1)
		go s.indexLoop()
	}
	return s, nil
}

func (s *Store) closeFiles() {
	if s.msgLog != nil {
		s.msgLog.Close()
	}
	if s.actLog != nil {
		s.actLog.Close()
	}
	s.pool.Close()
	s.lock.Unlock()
}

func (s *Store) isClosed() bool { return s.closedFlg.Load() }

// recover loads the checkpoint and replays both logs after it.
func (s *Store) recover() error {
	ck := s.loadCheckpoint()
	var err error
	s.msgLog, err = segment.OpenLog(filepath.Join(s.dir, "messagelog"), segment.LogOptions{FS: s.opts.FS, SegmentSize: s.opts.SegmentSize,
		// Generous, so lowering the limits never turns old records into damage.
		MaxRecordSize: max(int64(s.opts.Limits.MaxEncodedSize()+recordOverhead), 64<<20),
		NoMmap:        s.opts.Flush != FlushAsync}) // see doc.go, Writing through a mapping
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	s.actLog, err = segment.OpenLog(filepath.Join(s.dir, "actionlog"), segment.LogOptions{FS: s.opts.FS, SegmentSize: s.opts.ActionSegmentSize, NoMmap: true})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if err := s.recoverMessages(ck); err != nil {
		return err
	}
	// Retention may have deleted segments after the checkpoint was written.
	if err := s.raiseMins(s.msgLog.Start()); err != nil {
		return err
	}
	return s.recoverActions(ck)
}

func (s *Store) recoverMessages(ck *checkpoint) error {
	s.lastTs = ck.lastTs
	for _, cs := range ck.subjects {
		sj, err := s.subjectFor(cs.name, true)
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		sj.next, sj.flushed, sj.min, sj.bytes = cs.next, cs.next, cs.min, cs.bytes
		sj.log.SetFirst(cs.min)
	}
	res, err := s.msgLog.Recover(ck.msgOffset, s.opts.SkipCorrupt, func(off int64, kind uint8, payload []byte) error {
		if kind != recordMessage {
			s.lg.Error("unknown message-log record kind; skipped", zap.Int64("offset", off), zap.Uint8("kind", kind))
			return nil
		}
		seq, ts, msg, err := parseRecordPayload(payload)
		var v protocol.View
		if err == nil {
			v, err = protocol.ParseMessageNoCRC(msg)
		}
		if err != nil {
			s.lg.Error("message record with a valid crc does not parse; skipped", zap.Int64("offset", off), zap.Error(err))
			return nil
		}
		sj, err := s.subjectFor(string(v.Subject), true)
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if seq < sj.next {
			return nil // indexed before the checkpoint
		}
		for sj.next < seq {
			sj.addHole()
			sj.next++
			s.open.Holes++
		}
		e := entry{offset: off, size: uint32(segment.HeaderSize + len(payload)), timestamp: ts, deliverAt: v.DeliverAtMillis}
		v.Tags(func(t []byte) bool { e.bloom |= tagBloom(t); return true })
		if err := sj.addEntry(&e); err != nil {
			return err
		}
		sj.bytes += int64(e.size)
		sj.next++
		s.lastTs = max(s.lastTs, ts)
		s.open.MessagesReplayed++
		return nil
	})
	if err != nil {
		if errors.Is(err, segment.ErrCorrupt) {
			return fmt.Errorf("store: message log: %w (%v); set SkipCorrupt to open without the damaged range", ErrCorrupt, err)
		}
		return fmt.Errorf("store: message log recovery: %w", err)
	}
	s.open.TornMessageTail = res.TornAt
	s.open.Corrupt = append(s.open.Corrupt, res.Corrupt...)
	if res.TornAt >= 0 {
		s.lg.Warn("torn message-log tail cut off", zap.Int64("offset", res.TornAt))
	}
	for _, r := range res.Corrupt {
		s.lg.Error("damaged message-log range skipped; its messages are lost", zap.Int64("from", r.From), zap.Int64("to", r.To))
		s.stats.corruptRanges.Add(1)
	}
	for _, sj := range s.subjects {
		if err := sj.flush(); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if sj.log.Len() > sj.next {
			if err := sj.log.Truncate(sj.next); err != nil {
				return fmt.Errorf("store: %w", err)
			}
		}
		sj.visible = sj.next
	}
	s.goodEnd.Store(res.End)
	s.lastPublishedTs.Store(s.lastTs)
	s.recoveredMsgEnd, s.replTs = res.End, s.lastTs
	return nil
}

func (s *Store) recoverActions(ck *checkpoint) error {
	for _, cg := range ck.groups {
		sj, err := s.subjectFor(cg.key.subject, true)
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		g := s.newGroup(cg.key, sj)
		g.version, g.cursor, g.returned = cg.version, cg.cursor, cg.returned
		for _, cc := range cg.consumers {
			c, err := s.consumerFor(g, cc.id)
			if err != nil {
				return fmt.Errorf("store: %w", err)
			}
			c.next, c.acked, c.plFlushed = cc.next, cc.acked, cc.next
		}
		s.groups[cg.key] = g
	}
	res, err := s.actLog.Recover(ck.actionOffset, s.opts.SkipCorrupt, func(off int64, kind uint8, payload []byte) error {
		a, err := decodeAction(kind, payload)
		if err != nil {
			s.lg.Error("action record with a valid crc does not parse; skipped", zap.Int64("offset", off), zap.Error(err))
			return nil
		}
		key := groupKey{subject: a.subject, group: a.group, broadcast: a.broadcast}
		g := s.groups[key]
		if g == nil {
			sj, err := s.subjectFor(a.subject, true)
			if err != nil {
				return fmt.Errorf("store: %w", err)
			}
			g = s.newGroup(key, sj)
			s.groups[key] = g
		}
		if a.version <= g.version {
			return nil
		}
		if err := g.apply(s, &a); err != nil {
			return err
		}
		if a.kind == actPull && !key.broadcast && len(a.runs) > 0 {
			if err := g.consumers[a.consumer].writePullLog(a.seq, expandRuns(a.runs)); err != nil {
				return err
			}
		}
		s.open.ActionsReplayed++
		return nil
	})
	if err != nil {
		if errors.Is(err, segment.ErrCorrupt) {
			return fmt.Errorf("store: action log: %w (%v); set SkipCorrupt to open without the damaged range", ErrCorrupt, err)
		}
		return fmt.Errorf("store: action log recovery: %w", err)
	}
	s.open.TornActionTail = res.TornAt
	s.open.Corrupt = append(s.open.Corrupt, res.Corrupt...)
	for _, r := range res.Corrupt {
		s.lg.Error("damaged action-log range skipped; pulls and acks in it are lost", zap.Int64("from", r.From), zap.Int64("to", r.To))
		s.stats.corruptRanges.Add(1)
	}
	for _, g := range s.groups {
		if _, visible := g.subj.bounds(); g.cursor > visible {
			// Messages lost with an async flush: the cursor cannot pass the end.
			g.cursor = visible
		}
	}
	s.actions = newActionLog(s.actLog)
	s.actions.onFlush = s.signalCommit
	s.recoveredActEnd = s.actLog.End()
	return nil
}

// flushLoop fdatasyncs the message log every FlushInterval (FlushAsync)
// and then readies its mapping ahead of the writer (prefaulter).
func (s *Store) flushLoop() {
	var ahead prefaulter
	s.every(s.opts.FlushInterval, func() {
		if err := s.msgLog.Sync(); err != nil {
			s.writeFailed.Store(true)
			s.lg.Error("message log sync failed", zap.Error(err))
		}
		ahead.run(s.msgLog)
	})
}

// prefaulter keeps the pages the message-log writer will copy into next
// present (segment.Log.Prefault), so an append under FlushAsync, which
// copies its record into the log's mapping on the caller's goroutine
// (often a server's event loop), does not stop every few records for a
// page fault that allocates and zeroes a page. It works from flushLoop,
// twice as far ahead as the last interval's appends went, between 4 and 64
// MiB, and does not do again what it did.
type prefaulter struct {
	lastEnd int64 // the log's end at the last run
	done    int64 // readied up to here
}

func (p *prefaulter) run(log *segment.Log) {
	end := log.End()
	ahead := min(max(2*(end-p.lastEnd), 4<<20), 64<<20)
	p.lastEnd = end
	if from := max(end, p.done); from < end+ahead {
		p.done = log.Prefault(from, end+ahead)
	}
}

// pageCacheLoop drops the message log's durable bytes more than
// PageCacheWindow (ReplicaPageCacheWindow on a replica) behind its synced
// end from the page cache every PageCacheInterval (doc.go, Page cache).
func (s *Store) pageCacheLoop() {
	s.every(s.opts.PageCacheInterval, func() {
		window := s.opts.PageCacheWindow
		if s.replica.Load() {
			window = s.opts.ReplicaPageCacheWindow
		}
		if window <= 0 {
			return
		}
		from, to := s.msgLog.DropCache(s.msgLog.Synced() - window)
		s.stats.cacheDropped.Add(to - from)
	})
}

// actionFlushLoop writes and syncs the action log every ActionFlushInterval.
func (s *Store) actionFlushLoop() {
	s.every(s.opts.ActionFlushInterval, func() {
		if err := s.actions.flush(); err != nil {
			s.lg.Error("action log flush failed; retrying", zap.Error(err))
		}
	})
}

// checkpointLoop writes a checkpoint every CheckpointInterval.
func (s *Store) checkpointLoop() {
	s.every(s.opts.CheckpointInterval, func() {
		if err := s.Checkpoint(); err != nil {
			s.lg.Error("checkpoint failed", zap.Error(err))
		}
	})
}

// every runs fn each interval until the store stops; the body of the
// background loops, which Close waits for through s.bg.
func (s *Store) every(interval time.Duration, fn func()) {
	defer s.bg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			fn()
		}
	}
}

func (s *Store) retentionLoop() {
	s.every(s.opts.RetentionInterval, func() {
		if _, err := s.runRetention(); err != nil {
			s.lg.Error("retention failed", zap.Error(err))
		}
	})
}

// Close stops accepting work, completes every queued append, writes a final
// checkpoint and closes the files. Pulls and acks still running when Close
// is called may fail with errors; the broker stops serving first.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	s.closedFlg.Store(true)
	close(s.appendCh)
	s.closeMu.Unlock()
	s.wg.Wait()
	close(s.stop)
	s.bg.Wait()
	if s.index != nil {
		s.index.close()
	}
	s.closing.Store(true)
	s.ckptMu.Lock()
	err := s.checkpointLocked()
	s.ckptMu.Unlock()
	s.subjectsMu.Lock()
	for _, sj := range s.subjects {
		sj.log.Close()
	}
	s.subjectsMu.Unlock()
	s.closeFiles()
	return err
}

// Read returns up to max stored messages of subject from consume sequence
// from on (for tools and tests; consumers use Pull). PullSeq equals
// ConsumeSeq in the result.
func (s *Store) Read(subject string, from int64, max int) ([]Pulled, error) {
	sj, _ := s.subjectFor(subject, false)
	if sj == nil {
		return nil, fmt.Errorf("%w: %s", ErrUnknownSubject, subject)
	}
	lo, visible := sj.bounds()
	from = maxInt64(from, lo)
	n := int(minInt64(int64(max), visible-from))
	if n <= 0 {
		return nil, nil
	}
	buf := make([]byte, n*entryWidth)
	k, err := sj.readEntries(from, buf)
	if err != nil {
		return nil, err
	}
	ds := make([]delivery, 0, k)
	for i := 0; i < k; i++ {
		e, ok := decodeEntry(buf[i*entryWidth:])
		if !ok {
			s.stats.corruptReads.Add(1)
			continue
		}
		if e.size == 0 {
			continue
		}
		ds = append(ds, delivery{pullSeq: from + int64(i), seq: from + int64(i), e: e})
	}
	msgs, _ := s.readDeliveries(sj, ds, nil)
	return msgs, nil
}

func maxInt64(a, b int64) int64 { return max(a, b) }
func minInt64(a, b int64) int64 { return min(a, b) }

package store

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/pkg/clock"
	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/segment"
	"github.com/qmq-go/qmq/pkg/timewheel"
)

// Store keeps delayed messages on disk and hands them out when due. See the
// package documentation for the files, the goroutines and the guarantees.
type Store struct {
	dir        string
	opts       Options
	clock      clock.Clock
	lg         *zap.Logger
	lock       *fsutil.DirLock
	id         uint64 // the store's ID (id file)
	origin     Origin // where the store came from (origin file)
	maxMessage int64  // largest encoded message accepted

	// Append path: writeLoop writes log through batch; syncLoop syncs it
	// and completes waiters.
	closeMu    sync.RWMutex // guards closed and sends on appendCh
	closed     bool
	appendCh   chan *appendReq
	log        *segment.Log
	batch      *segment.Batch
	head       [appendTimeSize]byte // the append time of the group being written
	syncMu     sync.Mutex           // guards pending
	pending    syncJob
	syncWake   chan struct{}
	takenBack  chan struct{} // writeGroup dealt with a failed write (takeBack)
	writerDone chan struct{}
	errMu      sync.Mutex
	writeErr   error        // sticky message-log write or sync failure
	indexErr   error        // schedule files cannot be written now (replay stalled; cleared by a retry)
	rollErr    error        // the last group that needed a new segment could not make one
	written    atomic.Int64 // end of the message log written
	durable    atomic.Int64 // end of the message log fdatasynced
	appendWG   sync.WaitGroup

	// Index state, guarded by mu. Fields of hourState other than dispatched
	// are written only by indexLoop (under mu), so indexLoop reads them
	// without it.
	mu       sync.Mutex
	hours    map[int64]*hourState
	wheel    *timewheel.Wheel[entry]
	inflight map[uint64]*firedBatch
	batchSeq uint64

	// Owned by indexLoop.
	reader           *segment.Reader
	replayPos        int64
	recoveredEnd     int64
	caughtUp         bool
	replayErr        error     // sticky: the message log is corrupt past here
	replayRetryAt    time.Time // a stalled replay (indexErr) tries again then
	unloaded         []int64   // hours not fully loaded into the wheel, ascending
	dirtyHours       map[int64]struct{}
	ckptDirty        bool
	ckptFailing      bool // the last checkpoint failed (logged once)
	ckptWAL          int64
	lastCkpt         int64
	ckptCost         time.Duration // how long the last checkpoint took
	lastDispatchSync int64
	lastRetain       int64

	schedules *fileCache
	dispatch  *dispatchLogs
	changes   changes // replication source: what changed (log under mu)

	// Cancel (cancel.go): the fire rule's state, guarded by mu, and the
	// index of stored messages by id and schedule key (its own lock, taken
	// before mu, never after).
	fireMark     int64
	cancelled    cancelSet
	idx          *schedIndex
	replayedPos  atomic.Int64  // the replay's position, published after the index is updated
	cancelsDirty bool          // cancel entries written since the dispatch logs were last synced (indexLoop)
	indexReady   chan struct{} // closed once rebuildIndex has indexed the hour files found at Open

	due       chan []Due
	indexWake chan struct{}
	fireWake  chan struct{}
	syncReq   chan chan error
	quit      chan struct{}
	wg        sync.WaitGroup

	counters counters
}

// maxRecordSize bounds the message length that readers of the message log
// and the schedule files accept. It does not follow Options.Limits, so that
// lowering the limits never makes stored messages look corrupt; lengths
// are checked against the file's size before anything is read.
const maxRecordSize = 1 << 30

// hourState describes one hour's schedule file.
type hourState struct {
	size       int64 // bytes replayed into the file
	records    int64
	dispatched int64 // dispatch entries (exact once loaded)
	lastWAL    int64 // WAL offset of the last record already in the file (rebuild only)
	// loadedTo is the hour's load mark (Unix ms): its messages due at or
	// before it are in the wheel, handed out or dispatched, and replayed
	// records due by then go straight to the wheel. notLoaded: none yet.
	loadedTo int64
}

// notLoaded is the load mark of an hour not loaded at all.
const notLoaded = math.MinInt64

func (st *hourState) loaded() bool { return st.loadedTo != notLoaded }

// full reports whether every message hour h can hold is within its load
// mark (a message of hour h is due before the hour ends).
func (st *hourState) full(h int64) bool { return st.loadedTo >= hourStart(h+1)-1 }

type counters struct {
	appended, rejected, fired, dispatched, corrupt atomic.Uint64
}

// Open opens (creating if needed) the store in dir, recovers it, and starts
// its goroutines. clk nil means the real clock; lg nil means no logging.
func Open(dir string, opts Options, clk clock.Clock, lg *zap.Logger) (*Store, error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if clk == nil {
		clk = clock.Real()
	}
	if lg == nil {
		lg = zap.NewNop()
	}
	if err := promoteReplicaDir(dir, lg); err != nil {
		return nil, fmt.Errorf("delay/store: promote replica %s: %w", dir, err)
	}
	lock, err := lockDirs(dir)
	if err != nil {
		return nil, err
	}
	s := &Store{
		dir:        dir,
		opts:       opts,
		clock:      clk,
		lg:         lg.Named("delaystore"),
		lock:       lock,
		maxMessage: int64(opts.Limits.MaxEncodedSize()),
		appendCh:   make(chan *appendReq, 1024),
		syncWake:   make(chan struct{}, 1),
		takenBack:  make(chan struct{}, 1),
		writerDone: make(chan struct{}),
		hours:      make(map[int64]*hourState),
		inflight:   make(map[uint64]*firedBatch),
		dirtyHours: make(map[int64]struct{}),
		schedules:  newFileCache(filepath.Join(dir, scheduleDir), opts.MaxOpenFiles),
		dispatch:   newDispatchLogs(filepath.Join(dir, dispatchDir), opts.MaxOpenFiles, opts.SyncDispatch),
		due:        make(chan []Due, opts.DueQueue),
		indexWake:  make(chan struct{}, 1),
		fireWake:   make(chan struct{}, 1),
		syncReq:    make(chan chan error),
		quit:       make(chan struct{}),
		changes:    changes{log: newChangeLog()},
		cancelled:  cancelSet{},
		idx:        newSchedIndex(),
		indexReady: make(chan struct{}),
	}
	if s.id, err = loadID(dir); err != nil {
		lock.Unlock()
		return nil, fmt.Errorf("delay/store: %w", err)
	}
	if s.origin, err = readOrigin(dir, s.lg); err != nil {
		lock.Unlock()
		return nil, fmt.Errorf("delay/store: %w", err)
	}
	if s.maxMessage > maxRecordSize {
		s.maxMessage = maxRecordSize
	}
	now := clk.Now().UnixMilli()
	slots := int((opts.Window+time.Hour)/opts.Tick) + 1
	if s.wheel, err = timewheel.New[entry](opts.Tick, slots, now); err != nil {
		lock.Unlock()
		return nil, err
	}
	if err := s.recover(); err != nil {
		s.wheel.Free()
		s.closeFiles()
		return nil, fmt.Errorf("delay/store: recover %s: %w", dir, err)
	}
	toIndex := make(map[int64]hourCheckpoint, len(s.hours))
	indexBytes := int64(0)
	for h, st := range s.hours {
		if st.size > 0 {
			toIndex[h] = hourCheckpoint{hour: h, size: st.size, records: st.records}
			indexBytes += st.size
		}
	}
	if indexBytes <= syncIndexBytes {
		// Small: indexed before Open returns, so keyed appends are taken at once.
		s.wg.Add(1)
		s.rebuildIndex(toIndex)
		toIndex = nil
	}
	// Whatever an earlier run (or the master this copy came from) handed
	// out was due before now.
	s.fireMark = now
	s.replayedPos.Store(s.replayPos)
	s.lastCkpt, s.lastRetain, s.lastDispatchSync = now, now, now
	s.appendWG.Add(2)
	go s.writeLoop()
	go s.syncLoop()
	s.wg.Add(2)
	go s.indexLoop()
	go s.fireLoop()
	if toIndex != nil {
		s.wg.Add(1)
		go s.rebuildIndex(toIndex)
	}
	return s, nil
}

// lockDirs makes the directories of a store (or a copy of one) in dir,
// private to the server's user, and locks dir. The message log's directory
// is made when it is opened, after an old one is converted (migrate.go).
func lockDirs(dir string) (*fsutil.DirLock, error) {
	for _, d := range []string{dir, filepath.Join(dir, scheduleDir), filepath.Join(dir, dispatchDir)} {
		if err := fsutil.MkdirPrivate(fsutil.OS, d); err != nil {
			return nil, err
		}
	}
	return fsutil.LockDir(dir)
}

// Close stops taking messages, makes what was acknowledged durable, writes
// a checkpoint, stops the goroutines and closes the Due channel. Messages
// handed out through Due and not marked dispatched are handed out again
// after the next Open.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	close(s.appendCh)
	s.closeMu.Unlock()
	s.appendWG.Wait()
	close(s.quit)
	s.wg.Wait()
	close(s.due)
	s.mu.Lock()
	s.wheel.Free() // its chunks are mapped outside the Go heap
	s.mu.Unlock()
	s.closeFiles()
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.writeErr
}

func (s *Store) closeFiles() {
	if s.log != nil {
		s.log.Close()
	}
	s.schedules.closeAll()
	s.dispatch.close()
	s.lock.Unlock()
}

// Due returns the channel on which due messages are delivered, in batches
// and in due-time order, never before their due time. It is closed by Close.
// The receiver forwards them and then calls MarkDispatched.
func (s *Store) Due() <-chan []Due { return s.due }

// Result is the outcome of appending one message: Err is nil when the
// message is stored (per the flush policy), else a *protocol.Error (or an
// error wrapping one) saying why it is not.
type Result struct {
	Err error
}

// check validates one message for Append.
func (s *Store) check(msg []byte, now int64) (protocol.View, error) {
	if int64(len(msg)) > s.maxMessage {
		return protocol.View{}, protocol.Errorf(protocol.StatusTooLarge, fmt.Sprintf("message is %d bytes, limit %d", len(msg), s.maxMessage))
	}
	v, err := protocol.ParseMessage(msg)
	if err != nil {
		return v, fmt.Errorf("%w: %w", protocol.ErrInvalid, err)
	}
	if err := s.opts.Limits.CheckView(&v); err != nil {
		return v, err
	}
	if s.opts.CheckMessage != nil {
		if err := s.opts.CheckMessage(&v); err != nil {
			return v, err
		}
	}
	if latest := now + s.opts.Horizon.Milliseconds(); v.DeliverAtMillis > latest {
		return v, protocol.Errorf(protocol.StatusBeyondHorizon, fmt.Sprintf(
			"message %q is due %s, beyond the delay horizon of %s (latest %s)",
			v.ID, time.UnixMilli(v.DeliverAtMillis).UTC().Format(time.RFC3339),
			humanDuration(s.opts.Horizon), time.UnixMilli(latest).UTC().Format(time.RFC3339)))
	}
	return v, nil
}

// Append stores encoded messages (pkg/protocol encoding; DeliverAtMillis is
// the due time, 0 or past means at once) and calls done with one Result per
// message, in order, once every valid one is stored per the flush policy.
// Invalid, oversize and beyond-horizon messages fail at once and are never
// stored. The store reads msgs until done is called; done runs on a store
// goroutine (or the caller's, when nothing needs writing) and must not block.
func (s *Store) Append(msgs [][]byte, done func([]Result)) {
	req := &appendReq{results: make([]Result, len(msgs)), done: done}
	now := s.clock.Now().UnixMilli()
	var settles []func(bool)
	var keyed []int
	for i, m := range msgs {
		v, err := s.check(m, now)
		if err == nil {
			if key, ok := scheduleKey(&v); ok {
				var settle func(bool)
				var replaced uint64
				if settle, replaced, err = s.reserveKey(&v, key, replaces(&v)); err == nil {
					settles, keyed = append(settles, settle), append(keyed, i)
					if replaced != reservedLoc {
						// The old message goes in the same record.
						h, off := unpackLoc(replaced)
						m = append(appendControl(make([]byte, 0, controlSize+len(m)), controlReschedule, h, off), m...)
					}
				}
			}
		}
		if err != nil {
			req.results[i].Err = err
			s.counters.rejected.Add(1)
			continue
		}
		req.msgs = append(req.msgs, m)
		req.index = append(req.index, i)
		req.bytes += len(m)
	}
	if len(req.msgs) == 0 {
		done(req.results)
		return
	}
	if len(settles) > 0 {
		// Keys reserved for messages that end up not stored are free again.
		req.done = func(rs []Result) {
			for j, i := range keyed {
				settles[j](rs[i].Err == nil)
			}
			done(rs)
		}
	}
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		req.complete(protocol.Errorf(protocol.StatusShuttingDown, "delay store is closed"))
		return
	}
	s.appendCh <- req
	s.closeMu.RUnlock()
}

// AppendWait is Append that waits for the results.
func (s *Store) AppendWait(msgs [][]byte) []Result {
	ch := make(chan []Result, 1)
	s.Append(msgs, func(r []Result) { ch <- r })
	return <-ch
}

// AppendContext is Append that waits for the results or for ctx to end. When
// ctx ends first it returns ctx.Err(): the messages may or may not be stored
// (the caller must not report them stored), and msgs must stay unchanged
// until the store is done with them, which the caller cannot observe; pass
// copies if that matters.
func (s *Store) AppendContext(ctx context.Context, msgs [][]byte) ([]Result, error) {
	ch := make(chan []Result, 1)
	s.Append(msgs, func(r []Result) { ch <- r })
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Sync replays everything stored so far into the schedule files, fsyncs
// them and the dispatch logs, and writes a checkpoint.
func (s *Store) Sync() error {
	reply := make(chan error, 1)
	select {
	case s.syncReq <- reply:
		return <-reply
	case <-s.quit:
		return ErrClosed
	}
}

// humanDuration prints whole days as days.
func humanDuration(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return d.String()
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// replaces reports whether a keyed message replaces a pending one with its
// key (protocol.PropScheduleReplace).
func replaces(v *protocol.View) bool {
	found := false
	v.Properties(func(k, val []byte) bool {
		if string(k) == protocol.PropScheduleReplace {
			found = string(val) == "1" || string(val) == "true"
			return false
		}
		return true
	})
	return found
}

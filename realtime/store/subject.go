package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/qmq-go/qmq/pkg/hugemem"
	"github.com/qmq-go/qmq/pkg/segment"
)

// pendingFlushBytes is how many consume-log bytes a subject buffers in
// memory before writing them to its consume-log file.
const pendingFlushBytes = 16 << 10

// A subject's buffer starts at pendingFirstCap bytes and then grows at once
// to pendingFullCap, room for the entries that fill it (the write comes
// at pendingFlushBytes or more, a whole entry past it): growing by doubling
// copied every byte again and again on its way to 16 KiB, for each of
// thousands of subjects, and ended at 32 KiB, since the entry that crosses
// 16 KiB does not fit in 16 KiB.
const (
	pendingFirstCap = 32 * entryWidth
	pendingFullCap  = (pendingFlushBytes/entryWidth + 1) * entryWidth
)

// pendingBuffers hands out the subjects' buffers of the two usual sizes from
// slabs on huge pages (pkg/hugemem). With messages spread over thousands of
// subjects every entry lands in another subject's buffer, and with buffers
// of the Go heap's 4 KiB pages each was a TLB miss as well as a cache miss:
// 10,000 full buffers are 160 MiB, 40,000 pages. Measured on the subjects
// suite's workload (one producer, 10,000 subjects, durable flush): the
// broker spent ~3.7 µs of CPU a message against ~1.8 with one subject, and
// ~2.2–2.6 with the kernel backing all memory with huge pages (THP
// "always", an experiment); the slabs get that where THP is "madvise", the
// default of most distributions. Other sizes (a run that overflows a full
// buffer) come from the heap.
type pendingBuffers struct {
	first, full *hugemem.Slab
}

func newPendingBuffers() *pendingBuffers {
	return &pendingBuffers{first: hugemem.NewSlab(pendingFirstCap, 0), full: hugemem.NewSlab(pendingFullCap, 0)}
}

// get returns an empty buffer with room for size bytes. A nil
// pendingBuffers allocates from the heap.
func (p *pendingBuffers) get(size int) []byte {
	switch {
	case p == nil:
	case size == pendingFirstCap:
		return p.first.Get()
	case size == pendingFullCap:
		return p.full.Get()
	}
	return make([]byte, 0, size)
}

// stats returns the slabs' size and the part of it handed out.
func (p *pendingBuffers) stats() (bytes, inUse int64) {
	for _, s := range []*hugemem.Slab{p.first, p.full} {
		st := s.Stats()
		bytes += st.Bytes
		inUse += st.BytesInUse
	}
	return bytes, inUse
}

// put gives back a buffer that is no longer used (any buffer: those from
// the heap are left to the collector).
func (p *pendingBuffers) put(b []byte) {
	if p == nil || b == nil {
		return
	}
	if !p.full.Put(b) {
		p.first.Put(b)
	}
}

// subject is one subject's consume log and counters.
//
// next and touched belong to the appender goroutine (and to recovery before
// it starts). Everything else is guarded by mu: entries below flushed are in
// the file, entries in [flushed, flushed+len(pending)/entryWidth) are only in
// pending, and readers see entries in [min, visible).
//
// Layout: with messages spread over thousands of subjects, every message
// reaches a subject that is no longer in the CPU's caches, so the fields
// each message touches are packed into two cache lines: line 0 what the
// appender's first pass (next, touched, touchedIdx) and the commit
// (mu, visible, bytes, watched) touch, line 1 what indexing the entry touches
// (pending, appended) and the name. The struct is 192 bytes, a size class
// the allocator places at multiples of 64, so the lines are the CPU's.
// TestSubjectLayout checks the offsets.
type subject struct {
	// Line 0.
	next       int64 // appender: next sequence to assign
	touched    *commitGroup
	touchedIdx int32
	// watched is set once the subject is watched (Store.Watch): only then
	// does a commit call Options.OnAppend for it.
	watched atomic.Bool
	mu      sync.RWMutex
	visible int64
	bytes   int64 // message-log bytes of the kept, visible entries

	// Line 1.
	pending  []byte
	appended int64 // entries buffered since open
	name     string
	flushed  int64
	min      int64

	// Line 2: the rest.
	log *segment.FixedLog
	// appendedAtCheckpoint is appended at the last checkpoint: a subject
	// with no appends between two checkpoints releases its buffer.
	appendedAtCheckpoint int64
	buffers              *pendingBuffers // the store's; nil: the heap's
	_                    [40]byte
}

func (s *Store) newSubject(name string) (*subject, error) {
	l, err := segment.OpenFixed(filepath.Join(s.dir, "consumelog", dirName(name)), segment.FixedOptions{
		FS: s.opts.FS, Width: entryWidth, SegmentEntries: s.opts.ConsumeSegmentEntries, Pool: s.pool,
	})
	if err != nil {
		return nil, err
	}
	return &subject{name: name, log: l, buffers: s.pendingBuffers}, nil
}

// subjectFor returns the subject, creating it when create is set.
func (s *Store) subjectFor(name string, create bool) (*subject, error) {
	if sj := s.subjectTab.lookupString(name); sj != nil || !create {
		return sj, nil
	}
	s.subjectsMu.Lock()
	defer s.subjectsMu.Unlock()
	if sj := s.subjects[name]; sj != nil {
		return sj, nil
	}
	sj, err := s.newSubject(name)
	if err != nil {
		return nil, err
	}
	sj.watched.Store(s.watchedNames[name])
	s.subjects[name] = sj
	s.subjectTab.insert(sj)
	return sj, nil
}

// Watch asks for Options.OnAppend calls after commits of subject, which a
// commit makes only for watched subjects: a broker watches each subject it
// may have waiting pulls of, before its pulls look for messages, and the
// commit of thousands of subjects nobody pulls from calls nothing for them.
// A watch lasts until the store closes; subject need not exist yet.
func (s *Store) Watch(subject string) {
	s.subjectsMu.Lock()
	defer s.subjectsMu.Unlock()
	if s.watchedNames == nil {
		s.watchedNames = map[string]bool{}
	}
	s.watchedNames[subject] = true
	if sj := s.subjects[subject]; sj != nil {
		sj.watched.Store(true)
	}
}

// lookupSubject finds a subject by its name's bytes without allocating or
// locking (subjectTable).
func (s *Store) lookupSubject(name []byte) *subject {
	return s.subjectTab.lookup(name)
}

// addEntry appends the encoded entry of the next sequence.
func (sj *subject) addEntry(e *entry) error {
	sj.mu.Lock()
	defer sj.mu.Unlock()
	sj.addEntryLocked(e)
	if len(sj.pending) >= pendingFlushBytes {
		return sj.flushLocked()
	}
	return nil
}

// addEntryLocked buffers the entry of the next sequence; sj.mu is held.
func (sj *subject) addEntryLocked(e *entry) {
	e.put(sj.nextPending())
	sj.appended++
}

// addHole records that sequence seq's message is lost (recovery).
func (sj *subject) addHole() {
	sj.mu.Lock()
	clear(sj.nextPending())
	sj.mu.Unlock()
}

// nextPending extends pending by one entry and returns it (not zeroed);
// sj.mu is held.
func (sj *subject) nextPending() []byte {
	n := len(sj.pending)
	if cap(sj.pending)-n < entryWidth {
		size := pendingFirstCap
		switch {
		case n+entryWidth > pendingFullCap:
			// A run of the subject's messages in one group commit goes
			// past it (the write follows the run), or writes fail.
			size = 2 * cap(sj.pending)
		case cap(sj.pending) > 0:
			size = pendingFullCap
		}
		grown := append(sj.buffers.get(max(size, n+entryWidth)), sj.pending...)
		sj.buffers.put(sj.pending)
		sj.pending = grown
	}
	sj.pending = sj.pending[:n+entryWidth]
	return sj.pending[n:]
}

// release gives the buffer back (the subject is idle); sj.mu is held and
// nothing is buffered.
func (sj *subject) release() {
	sj.buffers.put(sj.pending)
	sj.pending = nil
}

func (sj *subject) flushLocked() error {
	if len(sj.pending) == 0 {
		return nil
	}
	if sj.log.Err() != nil {
		// A failed write poisoned the file: rewrite from the last good entry.
		if err := sj.log.Truncate(sj.flushed); err != nil {
			return fmt.Errorf("%w: consume log of %s: %w", ErrIO, sj.name, err)
		}
	}
	if err := sj.log.WriteAt(sj.flushed, sj.pending); err != nil {
		return fmt.Errorf("%w: consume log of %s: %w", ErrIO, sj.name, err)
	}
	sj.flushed += int64(len(sj.pending) / entryWidth)
	sj.pending = sj.pending[:0]
	return nil
}

// flush writes buffered entries to the consume-log file.
func (sj *subject) flush() error {
	sj.mu.Lock()
	defer sj.mu.Unlock()
	return sj.flushLocked()
}

// setVisible makes entries below n readable; bytes is their size.
func (sj *subject) setVisible(n, bytes int64) {
	sj.mu.Lock()
	if n > sj.visible {
		sj.visible = n
		sj.bytes += bytes
	}
	sj.mu.Unlock()
}

// rollback forgets entries at or above n (appends that failed). Appender only.
func (sj *subject) rollback(n int64) error {
	sj.next = n
	sj.mu.Lock()
	defer sj.mu.Unlock()
	if n >= sj.flushed {
		sj.pending = sj.pending[:(n-sj.flushed)*entryWidth]
		return nil
	}
	sj.pending = sj.pending[:0]
	sj.flushed = n
	return sj.log.Truncate(n)
}

// bounds returns the readable range [min, visible).
func (sj *subject) bounds() (min, visible int64) {
	sj.mu.RLock()
	defer sj.mu.RUnlock()
	return sj.min, sj.visible
}

// readEntries copies readable entries from seq into buf (whole entries) and
// returns how many; seq below min reads nothing. Buffered entries are copied
// under the lock; entries already in the file (immutable below visible) are
// read after it is released, so a slow read never holds up the appender.
func (sj *subject) readEntries(seq int64, buf []byte) (int, error) {
	sj.mu.RLock()
	if seq < sj.min {
		sj.mu.RUnlock()
		return 0, nil
	}
	n := min(int64(len(buf)/entryWidth), sj.visible-seq)
	if n <= 0 {
		sj.mu.RUnlock()
		return 0, nil
	}
	inFile := min(n, max(0, sj.flushed-seq))
	if inFile < n {
		from := (seq + inFile - sj.flushed) * entryWidth
		copy(buf[inFile*entryWidth:n*entryWidth], sj.pending[from:])
	}
	sj.mu.RUnlock()
	if inFile > 0 {
		r, err := sj.log.ReadAt(seq, buf[:inFile*entryWidth])
		if errors.Is(err, segment.ErrNoRecord) {
			return 0, nil // deleted by retention meanwhile
		}
		if err != nil {
			return 0, fmt.Errorf("consume log of %s: %w", sj.name, err)
		}
		if int64(r) < inFile {
			return r, nil
		}
	}
	return int(n), nil
}

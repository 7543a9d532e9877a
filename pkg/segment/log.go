package segment

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/fsutil"
)

// LogOptions configure a Log. The zero value of a field means its default.
type LogOptions struct {
	// FS is the file system (default fsutil.OS).
	FS fsutil.FS
	// SegmentSize is the size of a new segment file in bytes (default 1 GiB,
	// at least 4 KiB).
	SegmentSize int64
	// NoPreallocate skips fallocate on new segments (tests of sparse files).
	// It implies NoMmap.
	NoPreallocate bool
	// NoMmap writes every record with pwrite(2) instead of copying it into a
	// shared mapping of the segment being written (see doc.go, Writing).
	NoMmap bool
	// ResyncWindow bounds how far Recover searches past an invalid record for
	// a valid one (default 16 MiB).
	ResyncWindow int64
	// MaxRecordSize is the largest record (header included) the log holds
	// (default SegmentSize, and at most SegmentSize unless LargeRecords);
	// Recover treats a header claiming more as damaged instead of reading
	// that much.
	MaxRecordSize int64
	// LargeRecords lets a record larger than SegmentSize (up to
	// MaxRecordSize) into the log: it starts a segment of its own, created
	// and preallocated to the record's size (the delay store's message log,
	// whose records follow the message limits, not the segment size).
	LargeRecords bool
	// TrimStep is how much of a deleted segment's file DeleteBefore cuts
	// off at a time before removing it (default 32 MiB; negative: remove
	// at once), and TrimPause the pause between cuts (default 10ms). See
	// "Deleting segments" in doc.go.
	TrimStep  int64
	TrimPause time.Duration
}

// DefaultSegmentSize is the default size of a Log segment.
const DefaultSegmentSize = 1 << 30

func (o *LogOptions) applyDefaults() error {
	if o.FS == nil {
		o.FS = fsutil.OS
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.SegmentSize < 4096 {
		return fmt.Errorf("segment: SegmentSize must be at least 4096, got %d", o.SegmentSize)
	}
	if o.ResyncWindow == 0 {
		o.ResyncWindow = 16 << 20
	}
	if o.MaxRecordSize == 0 || (o.MaxRecordSize > o.SegmentSize && !o.LargeRecords) {
		o.MaxRecordSize = o.SegmentSize
	}
	if o.TrimStep == 0 {
		o.TrimStep = 32 << 20
	}
	if o.TrimPause == 0 {
		o.TrimPause = 10 * time.Millisecond
	}
	if o.TrimPause < 0 {
		return fmt.Errorf("segment: TrimPause must not be negative, got %v", o.TrimPause)
	}
	return nil
}

type logSegment struct {
	base int64
	cap  int64
	f    fsutil.File
	// mapped is the shared mapping of [0, cap) that Write copies records
	// into, while this is the segment being written; nil before the first
	// write, after the writer moved on, or where mapping is off or failed
	// (noMap). Both are guarded by Log.mu: the writer copies holding it for
	// reading, and only holders of the write lock map or unmap.
	mapped []byte
	noMap  bool
	// syncFiles are the Syncers' own descriptors of the file, by Syncer
	// id (syncer.go); opened under mu, closed holding syncMu for writing.
	syncFiles []fsutil.File
}

func (s *logSegment) end() int64 { return s.base + s.cap }

// Log is an append-only log of variable-size records in segment files. One
// goroutine writes; Sync may run concurrently with Write; reads may run on
// any goroutine.
type Log struct {
	dir  string
	opts LogOptions

	mu       sync.RWMutex // guards segs, unsynced, closed
	segs     []*logSegment
	unsynced []*logSegment // written since the last Sync, besides the last segment
	closed   bool

	// syncMu is held for reading by every Sync and Syncer.Sync, for
	// writing by Reset, Close and the removal of segments (no sync runs);
	// mainSyncMu lets one Sync at a time use the segments' own
	// descriptors. syncers counts the Syncers made (mu).
	syncMu     sync.RWMutex
	mainSyncMu sync.Mutex
	syncers    int

	// Zero filling (zerofill.go): filling is the start of the range
	// ZeroFill is writing (noFill when none) and writeTo the end the writer
	// is about to write to. Each stores its own before it loads the
	// other's, so a fill never covers bytes the writer has written or is
	// writing; a writer that reaches a fill's range waits on fillMu, which
	// ZeroFill holds throughout.
	fillMu  sync.Mutex
	filling atomic.Int64
	writeTo atomic.Int64

	end    atomic.Int64
	synced atomic.Int64
	// dropped is where DropCache's next call starts (dropcache.go).
	dropped atomic.Int64
	werr    atomic.Pointer[error]
}

// OpenLog opens (creating if needed) the log in dir. Its end is the start of
// its first segment until Recover or Reset says where the data ends.
func OpenLog(dir string, opts LogOptions) (*Log, error) {
	if err := opts.applyDefaults(); err != nil {
		return nil, err
	}
	if err := opts.FS.MkdirAll(dir, fsutil.DirMode); err != nil {
		return nil, fmt.Errorf("segment: create %s: %w", dir, err)
	}
	entries, err := opts.FS.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("segment: list %s: %w", dir, err)
	}
	l := &Log{dir: dir, opts: opts}
	l.filling.Store(noFill)
	for _, e := range entries {
		// A segment DeleteBefore was cutting down when the process ended.
		if name := e.Name(); !e.IsDir() && strings.HasSuffix(name, trashSuffix) {
			if err := opts.FS.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("segment: remove %s: %w", name, err)
			}
		}
	}
	bases := listBases(entries)
	for i, b := range bases {
		f, err := opts.FS.OpenFile(filepath.Join(dir, FileName(b)), os.O_RDWR, 0)
		if err != nil {
			l.closeFiles()
			return nil, fmt.Errorf("segment: open: %w", err)
		}
		size, err := f.Size()
		if err != nil {
			f.Close()
			l.closeFiles()
			return nil, fmt.Errorf("segment: stat: %w", err)
		}
		c := opts.SegmentSize
		if i+1 < len(bases) {
			c = bases[i+1] - b
		} else if size > c {
			c = size
		}
		l.segs = append(l.segs, &logSegment{base: b, cap: c, f: f})
	}
	if len(l.segs) > 0 {
		l.end.Store(l.segs[0].base)
		l.synced.Store(l.segs[0].base)
	}
	return l, nil
}

func (l *Log) closeFiles() {
	for _, s := range l.segs {
		s.f.Close()
	}
	l.segs = nil
}

// Dir returns the log's directory.
func (l *Log) Dir() string { return l.dir }

// End returns the offset the next record will be written at (or a later one
// if it does not fit in the current segment).
func (l *Log) End() int64 { return l.end.Load() }

// Synced returns the offset below which every written byte is durable.
func (l *Log) Synced() int64 { return l.synced.Load() }

// Start returns the offset of the first byte still kept.
func (l *Log) Start() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if len(l.segs) == 0 {
		return l.end.Load()
	}
	return l.segs[0].base
}

// Err returns the error that poisoned the log, or nil.
func (l *Log) Err() error {
	if p := l.werr.Load(); p != nil {
		return *p
	}
	return nil
}

func (l *Log) poison(err error) error {
	perr := error(&poisoned{cause: err})
	l.werr.CompareAndSwap(nil, &perr)
	return l.Err()
}

// SegmentInfo describes one segment file.
type SegmentInfo struct {
	Base, Size int64
}

// Segments lists the segments, oldest first.
func (l *Log) Segments() []SegmentInfo {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]SegmentInfo, len(l.segs))
	for i, s := range l.segs {
		out[i] = SegmentInfo{Base: s.base, Size: s.cap}
	}
	return out
}

// segmentFor returns the segment containing off; l.mu must be held.
func (l *Log) segmentFor(off int64) *logSegment {
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].end() > off })
	if i == len(l.segs) || l.segs[i].base > off {
		return nil
	}
	return l.segs[i]
}

// tail returns the write position and the end of its segment.
func (l *Log) tail() (end, segEnd int64) {
	end = l.end.Load()
	l.mu.RLock()
	defer l.mu.RUnlock()
	if s := l.segmentFor(end); s != nil {
		return end, s.end()
	}
	// end sits at a boundary with no segment yet: the next segment starts here.
	return end, end + l.opts.SegmentSize
}

// Room returns how many bytes can be written at the end without creating a
// segment file: what is left of the segment holding the end, 0 when none
// does (the next write starts a segment).
func (l *Log) Room() int64 {
	end := l.end.Load()
	l.mu.RLock()
	defer l.mu.RUnlock()
	if s := l.segmentFor(end); s != nil {
		return s.end() - end
	}
	return 0
}

// Batch collects records for one Write. Build it with Log.NewBatch or Reset,
// then Append; offsets are final once Write succeeds.
type Batch struct {
	l      *Log
	chunks []chunk
	next   int64
	segEnd int64
	n      int
	// arena holds the bytes of vectored chunks that are the batch's own
	// (record headers, small bodies: AppendSummed); its earlier bytes never
	// change while pieces refer to them, even after append moved it.
	arena []byte
	// header is AppendSummed's record header being built.
	header [HeaderSize]byte
}

type chunk struct {
	off  int64
	data []byte
	run  bool // data is the caller's (AppendRun): never appended to or reused
	// vec: the chunk's bytes are iov's pieces, in order (AppendSummed),
	// size bytes in all; arenaTail: the last piece ends where arena ends.
	vec       bool
	arenaTail bool
	iov       [][]byte
	size      int
}

// bytes returns the chunk's length.
func (c *chunk) bytes() int {
	if c.vec {
		return c.size
	}
	return len(c.data)
}

// NewBatch returns an empty batch that starts at the log's end.
func (l *Log) NewBatch() *Batch {
	b := &Batch{l: l}
	b.Reset()
	return b
}

// Reset empties b, keeping its buffers, and starts it at the log's end.
func (b *Batch) Reset() {
	for i := range b.chunks {
		c := &b.chunks[i]
		if c.run {
			c.data, c.run = nil, false
		} else {
			c.data = c.data[:0]
		}
		if c.vec {
			clear(c.iov) // the caller's bodies are not kept
			c.iov, c.vec, c.arenaTail, c.size = c.iov[:0], false, false, 0
		}
	}
	b.chunks = b.chunks[:0]
	b.arena = b.arena[:0]
	b.next, b.segEnd = b.l.tail()
	b.n = 0
}

// ResetAfter empties b, keeping its buffers, and starts it where prev ends:
// for a writer that builds the next batch while prev is being written.
func (b *Batch) ResetAfter(prev *Batch) {
	b.Reset()
	b.next, b.segEnd = prev.next, prev.segEnd
}

// Records returns how many records b holds.
func (b *Batch) Records() int { return b.n }

// Bytes returns how many bytes b holds.
func (b *Batch) Bytes() int {
	n := 0
	for i := range b.chunks {
		n += b.chunks[i].bytes()
	}
	return n
}

// End returns the offset just past b's last record.
func (b *Batch) End() int64 { return b.next }

// Append adds a record whose payload is head followed by body and returns its
// offset. It fails with ErrTooLarge when the record cannot fit in a segment.
func (b *Batch) Append(kind uint8, head, body []byte) (int64, error) {
	c, off, err := b.place(RecordSize(len(head) + len(body)))
	if err != nil {
		return 0, err
	}
	start := len(c.data)
	c.data = append(c.data, make([]byte, HeaderSize)...)
	c.data = append(c.data, head...)
	c.data = append(c.data, body...)
	putHeader(c.data[start:], kind, head, body)
	return off, nil
}

// AppendRecord adds rec, one whole record as ParseRecord accepted it (a
// replica copying a master's records), verbatim, and returns its offset: a
// copy without building the header and CRC again. It fails with ErrTooLarge
// when the record cannot fit in a segment.
func (b *Batch) AppendRecord(rec []byte) (int64, error) {
	c, off, err := b.place(int64(len(rec)))
	if err != nil {
		return 0, err
	}
	c.data = append(c.data, rec...)
	return off, nil
}

// AppendRun adds run, n whole records back to back as ParseRecord accepted
// them (a replica copying a chunk of a master's records), verbatim and
// without copying them: the batch refers to run until Reset, so run must
// not change before Write returns. The first record, of size first, is
// placed as AppendRecord would place it and the others follow it; a run
// that would cross the end of that segment fails with ErrSpansSegments
// (a master never sends one: its records do not span segments either),
// one whose first record cannot fit in a segment with ErrTooLarge. Nothing
// is added when it fails. It returns the first record's offset.
func (b *Batch) AppendRun(run []byte, first, n int) (int64, error) {
	switch {
	case first <= 0 || first > len(run):
		return 0, fmt.Errorf("segment: AppendRun: a first record of %d bytes in a run of %d", first, len(run))
	case int64(first) > b.l.opts.MaxRecordSize:
		return 0, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, first, b.l.opts.MaxRecordSize)
	}
	next, segEnd := b.next, b.segEnd
	if next+int64(first) > segEnd {
		next = segEnd
		segEnd = next + b.l.opts.SegmentSize
	}
	if next+int64(len(run)) > segEnd {
		return 0, fmt.Errorf("%w: %d bytes at %d, the segment ends at %d", ErrSpansSegments, len(run), next, segEnd)
	}
	if len(b.chunks) < cap(b.chunks) {
		b.chunks = b.chunks[:len(b.chunks)+1] // the slot's buffer (if any) is dropped, not reused
	} else {
		b.chunks = append(b.chunks, chunk{})
	}
	b.chunks[len(b.chunks)-1] = chunk{off: next, data: run, run: true}
	b.next, b.segEnd = next+int64(len(run)), segEnd
	b.n += n
	return next, nil
}

// place reserves size bytes for the next record (at the next segment's
// start when it does not fit in this one) and returns the chunk to append
// its bytes to and its offset.
func (b *Batch) place(size int64) (*chunk, int64, error) { return b.placeIn(size, false) }

// placeIn is place for a chunk of data (vec false) or of pieces (vec true).
func (b *Batch) placeIn(size int64, vec bool) (*chunk, int64, error) {
	if size > b.l.opts.MaxRecordSize {
		return nil, 0, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, size, b.l.opts.MaxRecordSize)
	}
	moved := false
	if b.next+size > b.segEnd {
		b.next = b.segEnd
		b.segEnd = b.next + max(b.l.opts.SegmentSize, size)
		moved = true
	}
	// A chunk never crosses a segment's start: a record that ends exactly
	// at a segment's end is followed by one in the next segment's chunk.
	if last := len(b.chunks) - 1; last < 0 || moved || b.chunks[last].run || b.chunks[last].vec != vec ||
		b.chunks[last].off+int64(b.chunks[last].bytes()) != b.next {
		if len(b.chunks) < cap(b.chunks) {
			b.chunks = b.chunks[:len(b.chunks)+1]
			c := &b.chunks[len(b.chunks)-1]
			c.off, c.vec = b.next, vec
		} else {
			b.chunks = append(b.chunks, chunk{off: b.next, vec: vec})
		}
	}
	off := b.next
	b.next += size
	b.n++
	return &b.chunks[len(b.chunks)-1], off, nil
}

// Write writes b's records. On failure the log is poisoned; b's records may
// be partly written and must be treated as lost.
func (l *Log) Write(b *Batch) error {
	if err := l.Err(); err != nil {
		return err
	}
	for i := range b.chunks {
		c := &b.chunks[i]
		n := int64(c.bytes())
		if n == 0 {
			continue
		}
		s, err := l.segmentForWrite(c.off, n)
		if err != nil {
			return l.poison(err)
		}
		l.awaitFill(c.off + n)
		if c.vec {
			err = l.writeVecAt(s, c.iov, c.off-s.base)
		} else {
			err = l.writeAt(s, c.data, c.off-s.base)
		}
		if err != nil {
			return l.poison(fmt.Errorf("segment: write %s at %d: %w", FileName(s.base), c.off-s.base, err))
		}
		l.end.Store(c.off + n)
	}
	return nil
}

// writeAt writes p at rel in s: a copy into s's mapping (made at the
// segment's first write) where there is one, else pwrite(2). The copy is a
// write to the page cache without a system call, which is most of the cost
// of appending one small record; see doc.go, Writing.
func (l *Log) writeAt(s *logSegment, p []byte, rel int64) error {
	l.mu.RLock()
	if s.mapped == nil && !s.noMap {
		l.mu.RUnlock()
		l.mapSegment(s)
		l.mu.RLock()
	}
	if m := s.mapped; m != nil && rel+int64(len(p)) <= int64(len(m)) {
		copyRecords(m[rel:], p)
		l.mu.RUnlock()
		return nil
	}
	l.mu.RUnlock()
	_, err := s.f.WriteAt(p, rel)
	return err
}

// copyRecords copies the records in src to dst one record at a time, in
// order, so that a process killed in the middle of the copy leaves the
// records before the one being copied whole and nothing after it: recovery
// then finds a torn tail, not damage in the middle of the log. One copy of
// the whole run does not: memmove copies large blocks with their first 32
// bytes stored last, so a SIGKILL mid-copy left a zero header followed by
// whole, valid records (seen in TestCrashRecovery's FlushAsync runs: the
// store refused to open, "damaged bytes in the middle of the log"). Within
// one record the order does not matter: its CRC fails until it is whole.
// Bytes that do not parse as a record header are copied in one piece.
func copyRecords(dst, src []byte) {
	for len(src) >= HeaderSize {
		n, err := headerLen(src)
		if err != nil || HeaderSize+n > len(src) {
			break
		}
		copy(dst, src[:HeaderSize+n])
		dst, src = dst[HeaderSize+n:], src[HeaderSize+n:]
	}
	copy(dst, src)
}

// mapSegment maps s for writing, or marks it unmappable: mapping is off,
// the file is not fsutil.Mappable (FaultFS), or allocating or mapping it
// failed (the writer then uses pwrite, whose errors it reports).
func (l *Log) mapSegment(s *logSegment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.mapped != nil || s.noMap || l.closed {
		return
	}
	mf, ok := s.f.(fsutil.Mappable)
	if !ok || l.opts.NoMmap || l.opts.NoPreallocate {
		s.noMap = true
		return
	}
	m, err := mf.MapShared(s.cap)
	if err != nil {
		s.noMap = true
		return
	}
	s.mapped = m
}

// unmapLocked releases s's mapping, if any; l.mu is held for writing. The
// bytes copied through it stay in the page cache (Sync still reaches them
// through the file).
func unmapLocked(s *logSegment) {
	if s.mapped != nil {
		_ = fsutil.Unmap(s.mapped)
		s.mapped = nil
	}
}

// Mapped reports whether the segment holding off is being written through a
// mapping (tests).
func (l *Log) Mapped(off int64) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	s := l.segmentFor(off)
	return s != nil && s.mapped != nil
}

// segmentForWrite returns the segment containing off, creating the next
// segment when off is the end of the last one (sized for need bytes under
// LargeRecords).
func (l *Log) segmentForWrite(off, need int64) (*logSegment, error) {
	l.mu.RLock()
	s := l.segmentFor(off)
	closed := l.closed
	l.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if s != nil {
		return s, nil
	}
	size := l.opts.SegmentSize
	if l.opts.LargeRecords && need > size {
		size = need
	}
	s, err := l.createSegment(off, size)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNewSegment, err)
	}
	l.mu.Lock()
	if n := len(l.segs); n > 0 {
		l.unsynced = append(l.unsynced, l.segs[n-1])
		unmapLocked(l.segs[n-1]) // the writer has moved on
	}
	l.segs = append(l.segs, s)
	l.mu.Unlock()
	return s, nil
}

func (l *Log) createSegment(base, size int64) (*logSegment, error) {
	path := filepath.Join(l.dir, FileName(base))
	f, err := l.opts.FS.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, fsutil.FileMode)
	if err != nil {
		return nil, fmt.Errorf("segment: create %s: %w", path, err)
	}
	if !l.opts.NoPreallocate {
		if err := f.Allocate(0, size); err != nil {
			f.Close()
			l.opts.FS.Remove(path)
			return nil, fmt.Errorf("segment: preallocate %s: %w", path, err)
		}
	}
	if err := l.opts.FS.SyncDir(l.dir); err != nil {
		f.Close()
		l.opts.FS.Remove(path)
		return nil, fmt.Errorf("segment: sync dir %s: %w", l.dir, err)
	}
	return &logSegment{base: base, cap: size, f: f}, nil
}

// Sync makes everything written so far durable. It may run while Write
// writes the next batch.
// Syncers (syncer.go) may sync at the same time.
func (l *Log) Sync() error {
	l.syncMu.RLock()
	defer l.syncMu.RUnlock()
	l.mainSyncMu.Lock()
	defer l.mainSyncMu.Unlock()
	if err := l.Err(); err != nil {
		return err
	}
	end := l.end.Load()
	l.mu.Lock()
	files := append([]*logSegment(nil), l.unsynced...)
	if n := len(l.segs); n > 0 {
		files = append(files, l.segs[n-1])
	}
	l.mu.Unlock()
	for _, s := range files {
		if err := s.f.Sync(); err != nil {
			return l.poison(fmt.Errorf("segment: sync %s: %w", FileName(s.base), err))
		}
	}
	l.markSynced(files, end)
	return nil
}

// ReadAt reads len(p) bytes at off; the range may span segments.
func (l *Log) ReadAt(p []byte, off int64) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for len(p) > 0 {
		s := l.segmentFor(off)
		if s == nil {
			return fmt.Errorf("%w: %d bytes at %d", ErrNoRecord, len(p), off)
		}
		n := min(int64(len(p)), s.end()-off)
		if _, err := s.f.ReadAt(p[:n], off-s.base); err != nil {
			return fmt.Errorf("segment: read %s at %d: %w", FileName(s.base), off-s.base, err)
		}
		p = p[n:]
		off += n
	}
	return nil
}

// ReadRecord reads and validates the record of size bytes at off into buf
// (grown if needed) and returns its kind and payload, which alias buf.
func (l *Log) ReadRecord(off int64, size int, buf []byte) (kind uint8, payload, out []byte, err error) {
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	if err := l.ReadAt(buf, off); err != nil {
		return 0, nil, buf, err
	}
	kind, payload, n, err := ParseRecord(buf)
	if err != nil {
		return 0, nil, buf, fmt.Errorf("record at %d: %w", off, err)
	}
	if n != size {
		return 0, nil, buf, fmt.Errorf("%w: record at %d is %d bytes, expected %d", ErrCorrupt, off, n, size)
	}
	return kind, payload, buf, nil
}

// Reset truncates the log to off (everything at or after off is removed),
// reopens its files and clears the poison. Recovery and write-failure
// handling call it with the last good offset.
func (l *Log) Reset(off int64) error {
	l.fillMu.Lock() // no ZeroFill while the segment is cut and reallocated
	defer l.fillMu.Unlock()
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	keep := l.segs[:0]
	var drop []*logSegment
	for _, s := range l.segs {
		closeSyncFilesLocked(s) // fresh descriptors after a failure, as for s.f
		if s.base >= off {
			drop = append(drop, s)
			continue
		}
		keep = append(keep, s)
	}
	for _, s := range drop {
		unmapLocked(s)
		s.f.Close()
		if err := l.opts.FS.Remove(filepath.Join(l.dir, FileName(s.base))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("segment: remove %s: %w", FileName(s.base), err)
		}
	}
	l.segs = keep
	// Segments written since the last Sync stay listed if they stay: a
	// Reset past Synced (a writer taking back a batch that could not start
	// a segment) must not leave earlier writes unsynced.
	stay := l.unsynced[:0]
	for _, u := range l.unsynced {
		if u.base < off {
			stay = append(stay, u)
		}
	}
	clear(l.unsynced[len(stay):])
	l.unsynced = stay
	if n := len(l.segs); n > 0 {
		s := l.segs[n-1]
		if off < s.end() {
			path := filepath.Join(l.dir, FileName(s.base))
			unmapLocked(s) // the file shrinks below: a copy past its end would fault
			s.noMap = false
			s.f.Close()
			f, err := l.opts.FS.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				return fmt.Errorf("segment: reopen %s: %w", path, err)
			}
			s.f = f
			// Drop the bytes after off and allocate zeros again.
			if err := f.Truncate(off - s.base); err != nil {
				return fmt.Errorf("segment: truncate %s: %w", path, err)
			}
			if !l.opts.NoPreallocate {
				if err := f.Allocate(0, s.cap); err != nil {
					return fmt.Errorf("segment: preallocate %s: %w", path, err)
				}
			}
			if err := f.Sync(); err != nil {
				return fmt.Errorf("segment: sync %s: %w", path, err)
			}
		}
	}
	if err := l.opts.FS.SyncDir(l.dir); err != nil {
		return fmt.Errorf("segment: sync dir: %w", err)
	}
	l.end.Store(off)
	l.writeTo.Store(off)
	if l.synced.Load() > off {
		l.synced.Store(off)
	}
	l.werr.Store(nil)
	return nil
}

// SetEnd declares where the data ends without touching files (a log whose
// end is known from a clean checkpoint).
func (l *Log) SetEnd(off int64) {
	l.end.Store(off)
	l.synced.Store(off)
}

// DeleteBefore removes whole segments that end at or before off, never the
// last one, and returns how many it removed. They leave the log at once;
// their files are then renamed, cut down in steps and removed without the
// log's lock, so appends, syncs and reads go on meanwhile (see "Deleting
// segments" in doc.go). A file that cannot be removed is reported; the
// segment has left the log either way (a file left under its own name is
// a segment again at the next OpenLog, one renamed is removed then).
func (l *Log) DeleteBefore(off int64) (int, error) {
	l.syncMu.Lock() // a Syncer may still be syncing a segment that leaves
	l.mu.Lock()
	var gone []*logSegment
	for len(l.segs) > 1 && l.segs[0].end() <= off && l.segs[1].base <= l.synced.Load() {
		s := l.segs[0]
		unmapLocked(s)
		closeSyncFilesLocked(s)
		gone = append(gone, s)
		l.segs = l.segs[1:]
	}
	l.mu.Unlock()
	l.syncMu.Unlock()
	var errs []error
	for _, s := range gone {
		errs = append(errs, l.removeSegment(s))
	}
	if len(gone) > 0 {
		errs = append(errs, l.opts.FS.SyncDir(l.dir))
	}
	return len(gone), errors.Join(errs...)
}

// trashSuffix marks a segment file DeleteBefore renamed to cut it down.
const trashSuffix = ".trash"

// removeSegment renames a segment that left the log, cuts its file down by
// TrimStep every TrimPause and removes it.
func (l *Log) removeSegment(s *logSegment) error {
	defer s.f.Close()
	name := FileName(s.base)
	path := filepath.Join(l.dir, name)
	if l.opts.TrimStep > 0 {
		trash := path + trashSuffix
		if err := l.opts.FS.Rename(path, trash); err != nil {
			return fmt.Errorf("segment: rename %s: %w", name, err)
		}
		path = trash
		size, err := s.f.Size()
		if err != nil {
			return fmt.Errorf("segment: stat %s: %w", name, err)
		}
		for size > l.opts.TrimStep {
			size -= l.opts.TrimStep
			if err := s.f.Truncate(size); err != nil {
				return fmt.Errorf("segment: cut %s: %w", name, err)
			}
			time.Sleep(l.opts.TrimPause)
		}
	}
	if err := l.opts.FS.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("segment: remove %s: %w", name, err)
	}
	return nil
}

// Close closes the log's files without syncing them.
func (l *Log) Close() error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	var first error
	for _, s := range l.segs {
		unmapLocked(s)
		closeSyncFilesLocked(s)
		if err := s.f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

package segment

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/qmq-go/qmq/pkg/fsutil"
)

// FixedOptions configure a FixedLog.
type FixedOptions struct {
	// FS is the file system (default fsutil.OS).
	FS fsutil.FS
	// Width is the size of one entry in bytes (required).
	Width int
	// SegmentEntries is the number of entries per segment file (default
	// 1<<20).
	SegmentEntries int64
	// Pool lends file handles; nil gives the log a private pool of 4.
	Pool *FilePool
}

// FixedLog is a log of fixed-width entries addressed by sequence, in segment
// files named by the sequence of their first entry. It is safe for
// concurrent use; writes to one range must come from one goroutine at a time.
type FixedLog struct {
	dir  string
	opts FixedOptions

	mu      sync.Mutex
	bases   []int64
	length  int64 // one past the highest entry written or found
	first   int64 // first entry kept
	dirty   map[int64]struct{}
	gen     uint64 // counts writes
	err     error
	created bool

	// lastPath caches the path of the file last named (reads and writes
	// name their file on every call, for the pool).
	lastPath atomic.Pointer[segmentPath]
}

type segmentPath struct {
	base int64
	path string
}

// OpenFixed opens the FixedLog in dir. The directory is created with the
// first write. Its length is what its last file holds, rounded down to whole
// entries.
func OpenFixed(dir string, opts FixedOptions) (*FixedLog, error) {
	if opts.Width <= 0 {
		return nil, fmt.Errorf("segment: FixedOptions.Width must be positive, got %d", opts.Width)
	}
	if opts.FS == nil {
		opts.FS = fsutil.OS
	}
	if opts.SegmentEntries == 0 {
		opts.SegmentEntries = 1 << 20
	}
	if opts.Pool == nil {
		opts.Pool = NewFilePool(opts.FS, 4)
	}
	l := &FixedLog{dir: dir, opts: opts, dirty: map[int64]struct{}{}}
	entries, err := opts.FS.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return l, nil
	case err != nil:
		return nil, fmt.Errorf("segment: list %s: %w", dir, err)
	}
	l.created = true
	l.bases = listBases(entries)
	if len(l.bases) == 0 {
		return l, nil
	}
	l.first = l.bases[0]
	last := l.bases[len(l.bases)-1]
	h, err := opts.Pool.Acquire(l.path(last), false)
	if err != nil {
		return nil, err
	}
	size, err := h.File.Size()
	h.Release()
	if err != nil {
		return nil, fmt.Errorf("segment: stat %s: %w", l.path(last), err)
	}
	l.length = last + size/int64(opts.Width)
	return l, nil
}

func (l *FixedLog) path(base int64) string {
	if p := l.lastPath.Load(); p != nil && p.base == base {
		return p.path
	}
	p := &segmentPath{base: base, path: filepath.Join(l.dir, FileName(base))}
	l.lastPath.Store(p)
	return p.path
}

func (l *FixedLog) base(seq int64) int64 { return seq - seq%l.opts.SegmentEntries }

// Width returns the entry width.
func (l *FixedLog) Width() int { return l.opts.Width }

// Len returns one past the highest entry written.
func (l *FixedLog) Len() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.length
}

// First returns the first entry kept (entries below it were deleted).
func (l *FixedLog) First() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first
}

// Err returns the error that poisoned the log, or nil.
func (l *FixedLog) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// WriteAt writes whole entries starting at entry seq. A failure poisons the
// log until Truncate or Reset.
func (l *FixedLog) WriteAt(seq int64, data []byte) error {
	w := int64(l.opts.Width)
	if int64(len(data))%w != 0 {
		return fmt.Errorf("segment: write of %d bytes is not whole %d-byte entries", len(data), w)
	}
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return err
	}
	if !l.created {
		if err := l.opts.FS.MkdirAll(l.dir, fsutil.DirMode); err != nil {
			l.mu.Unlock()
			return fmt.Errorf("segment: create %s: %w", l.dir, err)
		}
		l.created = true
	}
	l.mu.Unlock()
	for len(data) > 0 {
		b := l.base(seq)
		n := min(int64(len(data))/w, b+l.opts.SegmentEntries-seq)
		if err := l.writeSegment(b, seq, data[:n*w]); err != nil {
			l.mu.Lock()
			if l.err == nil {
				l.err = &poisoned{cause: err}
			}
			err = l.err
			l.mu.Unlock()
			return err
		}
		seq += n
		data = data[n*w:]
	}
	return nil
}

func (l *FixedLog) writeSegment(b, seq int64, data []byte) error {
	l.mu.Lock()
	i := sort.Search(len(l.bases), func(i int) bool { return l.bases[i] >= b })
	isNew := i == len(l.bases) || l.bases[i] != b
	l.mu.Unlock()
	h, err := l.opts.Pool.Acquire(l.path(b), true)
	if err != nil {
		return err
	}
	defer h.Release()
	if _, err := h.File.WriteAt(data, (seq-b)*int64(l.opts.Width)); err != nil {
		return fmt.Errorf("segment: write %s: %w", l.path(b), err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if isNew {
		i := sort.Search(len(l.bases), func(i int) bool { return l.bases[i] >= b })
		if i == len(l.bases) || l.bases[i] != b {
			l.bases = append(l.bases, 0)
			copy(l.bases[i+1:], l.bases[i:])
			l.bases[i] = b
		}
	}
	l.dirty[b] = struct{}{}
	l.gen++
	if end := seq + int64(len(data)/l.opts.Width); end > l.length {
		l.length = end
	}
	return nil
}

// ReadAt reads entries starting at seq into buf (whole entries) and returns
// how many it read; entries never written read as zeros, entries past the
// end of the files are not returned.
func (l *FixedLog) ReadAt(seq int64, buf []byte) (int, error) {
	w := int64(l.opts.Width)
	want := int64(len(buf)) / w
	l.mu.Lock()
	if seq+want > l.length {
		want = l.length - seq
	}
	first := l.first
	l.mu.Unlock()
	if seq < first {
		return 0, fmt.Errorf("%w: entry %d is below the first kept entry %d", ErrNoRecord, seq, first)
	}
	got := int64(0)
	for got < want {
		b := l.base(seq + got)
		n := min(want-got, b+l.opts.SegmentEntries-(seq+got))
		h, err := l.opts.Pool.Acquire(l.path(b), false)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				clear(buf[got*w : (got+n)*w])
				got += n
				continue
			}
			return int(got), err
		}
		k, err := h.File.ReadAt(buf[got*w:(got+n)*w], (seq+got-b)*w)
		h.Release()
		if err != nil && !errors.Is(err, io.EOF) {
			return int(got), fmt.Errorf("segment: read %s: %w", l.path(b), err)
		}
		if int64(k) < n*w {
			clear(buf[got*w+int64(k) : (got+n)*w])
		}
		got += n
	}
	return int(got), nil
}

// Sync makes every entry written so far durable.
func (l *FixedLog) Sync() error {
	l.mu.Lock()
	bases := make([]int64, 0, len(l.dirty))
	for b := range l.dirty {
		bases = append(bases, b)
	}
	clear(l.dirty)
	l.mu.Unlock()
	for _, b := range bases {
		h, err := l.opts.Pool.Acquire(l.path(b), false)
		if err == nil {
			err = h.File.Sync()
			h.Release()
		}
		if err != nil {
			l.mu.Lock()
			l.dirty[b] = struct{}{}
			l.mu.Unlock()
			return fmt.Errorf("segment: sync %s: %w", l.path(b), err)
		}
	}
	if len(bases) > 0 {
		return l.opts.FS.SyncDir(l.dir)
	}
	return nil
}

// Dirty reports whether entries were written since the last Sync or
// MarkSynced, and a generation that names the writes so far.
func (l *FixedLog) Dirty() (gen uint64, dirty bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen, len(l.dirty) > 0
}

// MarkSynced forgets what was written up to generation gen (from Dirty): the
// caller made it durable another way (fsutil.FS.SyncFS). Writes after gen
// keep the log dirty.
func (l *FixedLog) MarkSynced(gen uint64) {
	l.mu.Lock()
	if l.gen == gen {
		clear(l.dirty)
	}
	l.mu.Unlock()
}

// Truncate removes every entry at or after n and clears the poison.
func (l *FixedLog) Truncate(n int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	keep := l.bases[:0]
	for _, b := range l.bases {
		if b >= n && b > l.base(n) {
			l.opts.Pool.Forget(l.path(b))
			if err := l.opts.FS.Remove(l.path(b)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("segment: remove %s: %w", l.path(b), err)
			}
			delete(l.dirty, b)
			continue
		}
		keep = append(keep, b)
	}
	l.bases = keep
	if n < l.length {
		b := l.base(n)
		if i := sort.Search(len(l.bases), func(i int) bool { return l.bases[i] >= b }); i < len(l.bases) && l.bases[i] == b {
			h, err := l.opts.Pool.Acquire(l.path(b), false)
			if err != nil {
				return err
			}
			err = h.File.Truncate((n - b) * int64(l.opts.Width))
			h.Release()
			if err != nil {
				return fmt.Errorf("segment: truncate %s: %w", l.path(b), err)
			}
			l.dirty[b] = struct{}{}
		}
	}
	l.length = n
	if l.first > n {
		l.first = n
	}
	l.err = nil
	return nil
}

// DeleteBefore removes the segment files whose entries all lie below seq
// and marks entries below seq as gone. It returns how many files it removed.
func (l *FixedLog) DeleteBefore(seq int64) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq > l.first {
		l.first = seq
	}
	n := 0
	for len(l.bases) > 0 && l.bases[0]+l.opts.SegmentEntries <= seq {
		b := l.bases[0]
		l.opts.Pool.Forget(l.path(b))
		if err := l.opts.FS.Remove(l.path(b)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return n, fmt.Errorf("segment: remove %s: %w", l.path(b), err)
		}
		delete(l.dirty, b)
		l.bases = l.bases[1:]
		n++
	}
	return n, nil
}

// SetFirst declares the first kept entry (from a checkpoint).
func (l *FixedLog) SetFirst(seq int64) {
	l.mu.Lock()
	if seq > l.first {
		l.first = seq
	}
	l.mu.Unlock()
}

// Remove deletes the log's directory and every file in it.
func (l *FixedLog) Remove() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.bases {
		l.opts.Pool.Forget(l.path(b))
	}
	l.bases = nil
	l.length, l.first = 0, 0
	clear(l.dirty)
	l.created = false
	return l.opts.FS.RemoveAll(l.dir)
}

// Close forgets the log's open files.
func (l *FixedLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.bases {
		l.opts.Pool.Forget(l.path(b))
	}
	return nil
}

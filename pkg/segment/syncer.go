package segment

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/qmq-go/qmq/pkg/fsutil"
)

// Syncer makes a Log's written bytes durable as Log.Sync does, through
// descriptors of its own (one per segment, opened at its first sync of
// it), so that several Syncers, and Log.Sync, may fdatasync at once: the
// kernel reports a writeback error to every descriptor of the file once,
// where two syncs through one descriptor would see it only in whichever
// checked first, and the other could report the lost bytes durable (see
// doc.go, Writing). A Syncer is used by one goroutine at a
// time; Close releases its descriptors.
type Syncer struct {
	l     *Log
	id    int
	files []*logSegment // scratch: the segments one Sync covers
}

// NewSyncer returns a Syncer of l.
func (l *Log) NewSyncer() *Syncer {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := l.syncers
	l.syncers++
	return &Syncer{l: l, id: id}
}

// Sync makes every byte written to the log before it was called durable
// and returns the end it covered (Write had returned for every byte below
// it). A failure poisons the log, as Log.Sync's does.
func (sy *Syncer) Sync() (int64, error) {
	l := sy.l
	l.syncMu.RLock()
	defer l.syncMu.RUnlock()
	if err := l.Err(); err != nil {
		return 0, err
	}
	end := l.end.Load()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	segs := append(sy.files[:0], l.unsynced...)
	if n := len(l.segs); n > 0 {
		segs = append(segs, l.segs[n-1])
	}
	files := make([]fsutil.File, 0, len(segs))
	for _, s := range segs {
		f, err := l.syncFileLocked(s, sy.id)
		if err != nil {
			l.mu.Unlock()
			return 0, l.poison(err)
		}
		files = append(files, f)
	}
	l.mu.Unlock()
	sy.files = segs
	for i, f := range files {
		if err := f.Sync(); err != nil {
			return 0, l.poison(fmt.Errorf("segment: sync %s: %w", FileName(segs[i].base), err))
		}
	}
	l.markSynced(segs, end)
	clear(sy.files)
	return end, nil
}

// syncFileLocked returns syncer id's descriptor of s, opening it; l.mu is
// held. Descriptors are closed with the segment (closeSyncFilesLocked).
func (l *Log) syncFileLocked(s *logSegment, id int) (fsutil.File, error) {
	for len(s.syncFiles) <= id {
		s.syncFiles = append(s.syncFiles, nil)
	}
	if f := s.syncFiles[id]; f != nil {
		return f, nil
	}
	path := filepath.Join(l.dir, FileName(s.base))
	f, err := l.opts.FS.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("segment: open %s to sync: %w", path, err)
	}
	s.syncFiles[id] = f
	return f, nil
}

// closeSyncFilesLocked closes the Syncers' descriptors of s; l.syncMu is
// held for writing (no Syncer is using them) and l.mu too.
func closeSyncFilesLocked(s *logSegment) {
	for i, f := range s.syncFiles {
		if f != nil {
			f.Close()
			s.syncFiles[i] = nil
		}
	}
}

// markSynced records that segs were synced with every byte below end
// written: the segments the writer has left are no longer unsynced, and
// Synced moves up to end.
func (l *Log) markSynced(segs []*logSegment, end int64) {
	l.mu.Lock()
	keep := l.unsynced[:0]
	for _, u := range l.unsynced {
		synced := false
		for _, s := range segs {
			if s == u {
				synced = true
				break
			}
		}
		if !synced {
			keep = append(keep, u)
		}
	}
	clear(l.unsynced[len(keep):])
	l.unsynced = keep
	l.mu.Unlock()
	for {
		cur := l.synced.Load()
		if end <= cur || l.synced.CompareAndSwap(cur, end) {
			return
		}
	}
}

// Close closes the Syncer's descriptors. The Syncer must not be used after.
func (sy *Syncer) Close() {
	l := sy.l
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.segs {
		if sy.id < len(s.syncFiles) && s.syncFiles[sy.id] != nil {
			s.syncFiles[sy.id].Close()
			s.syncFiles[sy.id] = nil
		}
	}
}

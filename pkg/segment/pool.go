package segment

import (
	"container/list"
	"fmt"
	"os"
	"sync"

	"github.com/qmq-go/qmq/pkg/fsutil"
)

// FilePool keeps at most a fixed number of files open for many FixedLogs,
// closing the least recently used unreferenced one when a new file must be
// opened. A file that is in use (acquired and not released) is never
// closed, so the bound can be exceeded briefly by the number of concurrent
// users. Safe for concurrent use.
type FilePool struct {
	fs  fsutil.FS
	max int

	mu    sync.Mutex
	files map[string]*pooled
	lru   list.List // of *pooled, most recently used at the front
	opens int64
}

type pooled struct {
	path string
	f    fsutil.File
	refs int
	elem *list.Element
	h    Handle // lent to every user: its fields never change
	// forgotten: Forget dropped it while in use; the last Release closes it.
	forgotten bool
}

// Handle is an open file lent by a FilePool. Release it when done, once
// per Acquire.
type Handle struct {
	File fsutil.File
	p    *pooled
	pool *FilePool
}

// NewFilePool returns a pool that keeps at most max files open (default 1024
// when max ≤ 0).
func NewFilePool(fsys fsutil.FS, max int) *FilePool {
	if fsys == nil {
		fsys = fsutil.OS
	}
	if max <= 0 {
		max = 1024
	}
	return &FilePool{fs: fsys, max: max, files: map[string]*pooled{}}
}

// Acquire returns the open file at path, opening it (and creating it when
// create is set) if it is not open.
func (fp *FilePool) Acquire(path string, create bool) (*Handle, error) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if p, ok := fp.files[path]; ok {
		p.refs++
		fp.lru.MoveToFront(p.elem)
		return &p.h, nil
	}
	// Close the least recently used files nobody holds.
	for e := fp.lru.Back(); e != nil && len(fp.files) >= fp.max; {
		prev := e.Prev()
		if old := e.Value.(*pooled); old.refs == 0 {
			fp.lru.Remove(e)
			old.elem = nil
			old.f.Close()
			delete(fp.files, old.path)
		}
		e = prev
	}
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE
	}
	f, err := fp.fs.OpenFile(path, flag, fsutil.FileMode)
	if err != nil {
		return nil, fmt.Errorf("segment: open %s: %w", path, err)
	}
	fp.opens++
	p := &pooled{path: path, f: f, refs: 1}
	p.h = Handle{File: f, p: p, pool: fp}
	p.elem = fp.lru.PushFront(p)
	fp.files[path] = p
	return &p.h, nil
}

// Release returns h to the pool.
func (h *Handle) Release() {
	fp := h.pool
	fp.mu.Lock()
	defer fp.mu.Unlock()
	h.p.refs--
	if h.p.refs == 0 && h.p.forgotten {
		h.p.f.Close() // forgotten while in use: close now
	}
}

// Forget closes path's file (once its users release it) so it can be
// removed or replaced.
func (fp *FilePool) Forget(path string) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	p, ok := fp.files[path]
	if !ok {
		return
	}
	delete(fp.files, path)
	if p.elem != nil {
		fp.lru.Remove(p.elem)
		p.elem = nil
	}
	if p.refs == 0 {
		p.f.Close()
	} else {
		p.forgotten = true
	}
}

// Stats returns the number of open files and how many opens the pool did.
func (fp *FilePool) Stats() (open int, opens int64) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	return len(fp.files), fp.opens
}

// Close closes every unreferenced file.
func (fp *FilePool) Close() error {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	var first error
	for path, p := range fp.files {
		if p.refs == 0 {
			if err := p.f.Close(); err != nil && first == nil {
				first = err
			}
		}
		delete(fp.files, path)
	}
	fp.lru.Init()
	return first
}

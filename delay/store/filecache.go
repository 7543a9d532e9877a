package store

import (
	"container/list"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/qmq-go/qmq/pkg/fsutil"
)

// fileCache keeps at most max hour files open, closing the least recently
// used one that nobody holds. Thousands of hour files may exist; only the
// ones being written, loaded or read are open.
type fileCache struct {
	dir   string
	max   int
	mu    sync.Mutex
	files map[int64]*cachedFile
	lru   list.List // of *cachedFile, most recent at the front
}

type cachedFile struct {
	f      *os.File
	hour   int64
	refs   int
	elem   *list.Element
	doomed bool // forgotten while held: close on the last release
}

func newFileCache(dir string, max int) *fileCache {
	return &fileCache{dir: dir, max: max, files: make(map[int64]*cachedFile)}
}

// acquire returns hour h's file, opened read-write (created when create is
// set). The caller must release it.
func (c *fileCache) acquire(h int64, create bool) (*cachedFile, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cf, ok := c.files[h]; ok {
		cf.refs++
		c.lru.MoveToFront(cf.elem)
		return cf, nil
	}
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE
	}
	f, err := os.OpenFile(filepath.Join(c.dir, hourName(h)), flag, fsutil.FileMode)
	if err != nil {
		return nil, err
	}
	cf := &cachedFile{f: f, hour: h, refs: 1}
	cf.elem = c.lru.PushFront(cf)
	c.files[h] = cf
	for e := c.lru.Back(); e != nil && len(c.files) > c.max; {
		prev := e.Prev()
		if old := e.Value.(*cachedFile); old.refs == 0 {
			c.lru.Remove(e)
			delete(c.files, old.hour)
			old.f.Close()
		}
		e = prev
	}
	return cf, nil
}

func (c *fileCache) release(cf *cachedFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cf.refs--
	if cf.doomed && cf.refs == 0 {
		cf.f.Close()
	}
}

// forget drops hour h from the cache, closing its file once released.
func (c *fileCache) forget(h int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cf, ok := c.files[h]
	if !ok {
		return
	}
	delete(c.files, h)
	c.lru.Remove(cf.elem)
	if cf.refs == 0 {
		cf.f.Close()
	} else {
		cf.doomed = true
	}
}

func (c *fileCache) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h, cf := range c.files {
		cf.f.Close()
		delete(c.files, h)
	}
	c.lru.Init()
}

// fdatasync flushes f's data (and the metadata needed to read it back).
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}

package store

import (
	"path/filepath"
	"sync"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/segment"
)

// fileCache keeps at most max hour files of one directory open: a
// segment.FilePool named by hour. Thousands of hour files may exist; only
// the ones being written, loaded or read are open.
type fileCache struct {
	dir  string
	pool *segment.FilePool
	mu   sync.Mutex
	// paths holds each hour's file path, formatted once: the fire path
	// acquires a file for every run of records it reads.
	paths map[int64]string
}

// cachedFile is an hour file lent by a fileCache (File); release it when
// done.
type cachedFile = segment.Handle

func newFileCache(dir string, max int) *fileCache {
	return &fileCache{dir: dir, pool: segment.NewFilePool(fsutil.OS, max), paths: make(map[int64]string)}
}

// acquire returns hour h's file, opened read-write (created when create is
// set). The caller must release it.
func (c *fileCache) acquire(h int64, create bool) (*cachedFile, error) {
	return c.pool.Acquire(c.path(h), create)
}

func (c *fileCache) release(cf *cachedFile) { cf.Release() }

func (c *fileCache) path(h int64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.paths[h]
	if !ok {
		p = filepath.Join(c.dir, hourName(h))
		c.paths[h] = p
	}
	return p
}

// forget drops hour h from the cache, closing its file once released.
func (c *fileCache) forget(h int64) {
	c.pool.Forget(c.path(h))
	c.mu.Lock()
	delete(c.paths, h)
	c.mu.Unlock()
}

func (c *fileCache) closeAll() { c.pool.Close() }

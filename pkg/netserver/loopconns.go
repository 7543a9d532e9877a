package netserver

import (
	"sync"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"
)

// loopConns counts the open connections of each event loop, so that a loop
// knows when it serves a single one (see "Spin" in doc.go). A loop's count
// changes only in its own OnOpen and OnClose; the map is shared by the
// loops and guarded by mu.
type loopConns struct {
	mu    sync.Mutex
	loops map[gnet.EventLoop]*atomic.Int32
}

// of returns the counter of loop el, making it on first use.
func (l *loopConns) of(el gnet.EventLoop) *atomic.Int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.loops == nil {
		l.loops = make(map[gnet.EventLoop]*atomic.Int32)
	}
	n, ok := l.loops[el]
	if !ok {
		n = new(atomic.Int32)
		l.loops[el] = n
	}
	return n
}

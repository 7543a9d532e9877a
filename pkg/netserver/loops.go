package netserver

import (
	"sync"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"
)

// loop is what the server keeps per gnet event loop: its open connections,
// so that a loop knows when it serves a single one (see "Spin" in doc.go),
// and the buffer TLS connections decrypt into (tls.go). A loop's count
// changes only in its own OnOpen and OnClose and its buffer is used only on
// it; the map is shared by the loops and guarded by mu.
type loop struct {
	conns   atomic.Int32
	plain   []byte // a TLS read's plaintext, ReadBufferSize bytes (made on first use)
	records []byte // records crypto/tls wrote on the loop, for one socket write
}

type loops struct {
	mu    sync.Mutex
	loops map[gnet.EventLoop]*loop
}

// of returns the state of loop el, making it on first use.
func (l *loops) of(el gnet.EventLoop) *loop {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.loops == nil {
		l.loops = make(map[gnet.EventLoop]*loop)
	}
	lp, ok := l.loops[el]
	if !ok {
		lp = new(loop)
		l.loops[el] = lp
	}
	return lp
}

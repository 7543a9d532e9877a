package netserver

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
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

// spinGiveUp is how many spins in a row may miss the next request before
// the connection's spins stop; spinProbe is how often (in answered reads)
// a stopped connection tries again. A client far away, or one whose
// requests come rarely, then costs a few spins, not one per request.
const (
	spinGiveUp = 8
	spinProbe  = 64
)

// shouldSpin reports whether the connection spins after this answered read:
// always while its spins catch requests, and once every spinProbe reads
// after spinGiveUp misses in a row.
func (c *Conn) shouldSpin() bool {
	if c.spinMisses < spinGiveUp {
		return true
	}
	c.spinSkipped++
	if c.spinSkipped < spinProbe {
		return false
	}
	c.spinSkipped = 0
	return true
}

// spun records whether a spin caught the next request.
func (c *Conn) spun(caught bool) {
	if caught {
		c.spinMisses = 0
	} else if c.spinMisses < spinGiveUp {
		c.spinMisses++
	}
}

// spinFor polls the connection's socket without blocking until it has
// bytes to read, is closed, or d has passed. It runs on the event loop at
// the end of OnTraffic; when it sees bytes, gnet's next look at its poller
// (which does not block after events) finds them, so the loop answers the
// next request without having gone to sleep in the kernel and being woken.
// It reports whether the socket became readable.
func (c *Conn) spinFor(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		n, err := unix.Poll(c.pollFd[:], 0)
		switch {
		case n > 0:
			return true
		case err != nil && err != unix.EINTR, !time.Now().Before(deadline):
			return false
		}
	}
}

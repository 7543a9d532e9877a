package netserver

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Frame buffers for reuse. A large frame arrives in a buffer the handler
// then owns, or is copied into one out of its partial-frame chunks
// (partial.go). A new
// buffer costs more than the copy: the runtime zeroes it, and its pages,
// often just given back to the system by the scavenger, fault in again as
// the frame is written (about a quarter of the broker's CPU at 1 KiB
// messages; NOTES.md, "Large frames in reused buffers"). So the buffers
// come from a pool, by size class, and go back to it when the handler
// calls Request.Release: it says it holds nothing of the body any more. A
// handler that never calls it leaves the buffer to the garbage collector,
// as before. A buffer from the pool is not cleared: the frame's bytes
// overwrite all of it that the handler sees.
//
// The pool keeps at most Options.FramePoolBytes of idle buffers (a buffer
// given back past that goes to the collector), and empties itself when no
// frame took a buffer for framePoolIdle (the sweep looks), so an idle
// server gives the memory back. Idle buffers are not held for any
// connection and are not counted in MaxPartialBytes (the buffers and
// chunks of frames on their way in are).
//
// In test binaries (testing.Testing) Release poisons the buffer (fills it
// with poisonByte) before pooling it, so a use after Release shows as
// corrupt data: a message's CRC fails, a body compares wrong.
const (
	framePoolMinClass = 64 << 10 // the smallest class; smaller frames take it
	framePoolMaxFrame = 4 << 20  // larger frames get buffers of their own, never pooled
	framePoolIdle     = 10 * time.Second
	poisonByte        = 0xdb
)

// framePoolClasses is the number of size classes: 64 KiB, then four per
// doubling (a quarter apart, so a frame wastes under a fifth of its
// buffer) up to framePoolMaxFrame.
var framePoolClasses = frameClass(framePoolMaxFrame) + 1

// frameClass returns the size class of a frame of n bytes (n ≤
// framePoolMaxFrame): 0 for 64 KiB and less; above, 4(k-16)+j for the
// class of 2^k + j·2^(k-2) bytes (j in 1..4) with 2^k < n ≤ 2^(k+1).
func frameClass(n int) int {
	if n <= framePoolMinClass {
		return 0
	}
	k := bits.Len(uint(n-1)) - 1
	q := 1 << (k - 2)
	j := (n - 1<<k + q - 1) / q
	return 4*(k-16) + j
}

// classSize returns the buffer size of class c.
func classSize(c int) int {
	if c == 0 {
		return framePoolMinClass
	}
	k, j := 16+(c-1)/4, (c-1)%4+1
	return 1<<k + j<<(k-2)
}

// frameBuf is a large frame's buffer, handed to the request that carries
// the frame (Request.frame) and back to the pool by Request.Release.
type frameBuf struct {
	b     []byte // the whole buffer: classSize(class) bytes, or the frame's size when not pooled
	class int    // -1: not from the pool (too large, or the pool is off)
}

// framePool keeps large frames' buffers for reuse. Safe for concurrent
// use.
type framePool struct {
	max    int64 // Options.FramePoolBytes (≤ 0: off)
	poison bool  // fill a released buffer with poisonByte (tests)

	reused atomic.Uint64 // frames given a buffer from free
	made   atomic.Uint64 // frames given a new buffer

	mu    sync.Mutex
	free  [][]*frameBuf // by class, the most recently released last
	bytes int64         // idle bytes in free
	taken bool          // a buffer was asked for since the last trim
}

// init sizes the pool for at most max idle bytes (≤ 0: no pool).
func (p *framePool) init(max int64, poison bool) {
	p.max, p.poison = max, poison
	p.free = make([][]*frameBuf, framePoolClasses)
}

// get returns a buffer for a frame of n bytes, its b cut to n. Its
// contents are undefined.
func (p *framePool) get(n int) *frameBuf {
	if p.max <= 0 || n > framePoolMaxFrame {
		p.made.Add(1)
		return &frameBuf{b: make([]byte, n), class: -1}
	}
	c := frameClass(n)
	p.mu.Lock()
	p.taken = true
	if free := p.free[c]; len(free) > 0 {
		f := free[len(free)-1]
		free[len(free)-1] = nil
		p.free[c] = free[:len(free)-1]
		p.bytes -= int64(cap(f.b))
		p.mu.Unlock()
		p.reused.Add(1)
		f.b = f.b[:n]
		return f
	}
	p.mu.Unlock()
	p.made.Add(1)
	return &frameBuf{b: make([]byte, n, classSize(c)), class: c}
}

// put takes f back, to keep while the idle bytes stay within the bound
// (else the collector takes it). Nothing may use f's bytes any more.
func (p *framePool) put(f *frameBuf) {
	if f.class < 0 {
		return
	}
	b := f.b[:cap(f.b)]
	if p.poison {
		for i := range b {
			b[i] = poisonByte
		}
	}
	f.b = b
	p.mu.Lock()
	if p.bytes+int64(len(b)) <= p.max {
		p.free[f.class] = append(p.free[f.class], f)
		p.bytes += int64(len(b))
	}
	p.mu.Unlock()
}

// trim empties the pool when no buffer was asked for since the last trim
// (the sweep calls it every framePoolIdle).
func (p *framePool) trim() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.taken {
		p.taken = false
		return
	}
	for c, free := range p.free {
		clear(free)
		p.free[c] = free[:0]
	}
	p.bytes = 0
}

// stats returns the idle bytes held, and how many frames were given a
// buffer from the pool and a new one.
func (p *framePool) stats() (bytes int64, reused, made uint64) {
	p.mu.Lock()
	bytes = p.bytes
	p.mu.Unlock()
	return bytes, p.reused.Load(), p.made.Load()
}

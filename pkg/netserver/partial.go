package netserver

import (
	"math/bits"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// Partial frames. Every byte the server holds for a frame that has not
// fully arrived counts against Options.MaxPartialBytes, over all
// connections:
//
//   - a small frame (header and body no larger than ReadBufferSize) waits
//     where it is: in gnet's inbound buffer, or in a TLS connection's read
//     buffer. It counts as its length rounded up to a power of two (gnet's
//     ring buffer grows by doubling).
//   - a large frame is taken out of gnet's buffer at once (gnet's buffer
//     would grow to the frame's size by doubling, copying at each step,
//     and park its old arrays in process-wide pools), and the rest of it
//     is read from the socket straight to where it goes, past gnet's
//     buffer (readLarge; a TLS connection decrypts into it), as long as
//     the socket has bytes. Where it goes:
//   - whole: while the frames held this way stay within half of
//     MaxPartialBytes, a frame of up to framePoolMaxFrame on a connection
//     that is authenticated (or needs not be) gets its
//     buffer from the frame pool at once (framepool.go), reserved whole
//     when its header arrives; the handler gets that buffer (and may give
//     it back with Request.Release), so the frame is not copied again.
//     A client that sends headers and stalls holds at most that half.
//   - in chunks: otherwise the body goes into chunks of partialChunkSize
//     bytes mapped outside the Go heap, one chunk more each time the body
//     reaches the end of the last, counted as its chunks (so a frame
//     counts only what came). When the frame is whole it is copied once
//     into a buffer from the frame pool and the chunks go back: the
//     server keeps partialChunkReserve of them mapped for the next large
//     frame and unmaps the others, so the memory returns to the system as
//     soon as the frame is served or its connection closes, without
//     waiting for the garbage collector.
const (
	partialChunkSize    = 256 << 10
	partialChunkReserve = 16 // chunks kept mapped for reuse (4 MiB)
)

// chunkPool hands out partialChunkSize chunks of anonymous memory mapped
// outside the Go heap. Safe for concurrent use.
type chunkPool struct {
	mu   sync.Mutex
	free [][]byte
}

// get returns a chunk: a free one, or a new mapping.
func (p *chunkPool) get() ([]byte, error) {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		c := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	return unix.Mmap(-1, 0, partialChunkSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
}

// put takes a chunk back: it is kept for reuse while fewer than
// partialChunkReserve are, and unmapped otherwise.
func (p *chunkPool) put(c []byte) {
	p.mu.Lock()
	if len(p.free) < partialChunkReserve {
		p.free = append(p.free, c)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	_ = unix.Munmap(c)
}

// close unmaps the free chunks. No chunk may be in use.
func (p *chunkPool) close() {
	p.mu.Lock()
	free := p.free
	p.free = nil
	p.mu.Unlock()
	for _, c := range free {
		_ = unix.Munmap(c)
	}
}

// largeFrame is a frame larger than ReadBufferSize on its way in: its
// header, and its body in chunks.
type largeFrame struct {
	header [protocol.HeaderSize]byte
	body   int // body length
	filled int // body bytes received
	chunks [][]byte
	// whole, when set, is the frame's own buffer (header and body),
	// reserved whole against MaxPartialBytes; chunks is then unused.
	whole *frameBuf
}

// size returns the frame's length, header included.
func (f *largeFrame) size() int { return protocol.HeaderSize + f.body }

// requestID returns the frame's request id.
func (f *largeFrame) requestID() uint64 { return decodeHeader(f.header[:]).RequestID }

// remaining returns the body bytes still to come.
func (f *largeFrame) remaining() int { return f.body - f.filled }

// reservePartial counts n more bytes held in partial frames, or reports
// false (and counts nothing) when that would pass MaxPartialBytes.
// The count never passes the cap, not even for a moment (a compare and
// swap, not an add taken back), so Stats.PartialBytes is a true bound.
func (s *Server) reservePartial(n int64) bool { return s.reserveUpTo(n, s.opts.MaxPartialBytes) }

// reserveWhole is reservePartial for a large frame reserved whole, up to
// half of MaxPartialBytes: the other half stays for frames that count
// only what came.
func (s *Server) reserveWhole(n int64) bool { return s.reserveUpTo(n, s.opts.MaxPartialBytes/2) }

// reserveUpTo counts n more bytes held in partial frames unless the count
// would pass limit.
func (s *Server) reserveUpTo(n, limit int64) bool {
	for {
		cur := s.partialBytes.Load()
		if cur+n > limit {
			return false
		}
		if s.partialBytes.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// space returns where the next body bytes of c's large frame go: the free
// part of its last chunk, no longer than the bytes still to come. When the
// last chunk is full it takes a new one, or reports false when that would
// pass MaxPartialBytes or no memory could be mapped (the connection must
// then be refused; see refusePartial).
func (c *Conn) space() ([]byte, bool) {
	f := c.large
	if f.whole != nil {
		return f.whole.b[protocol.HeaderSize+f.filled : f.size()], true
	}
	at := f.filled % partialChunkSize
	if at == 0 && f.filled == len(f.chunks)*partialChunkSize {
		if !c.srv.reservePartial(partialChunkSize) {
			return nil, false
		}
		chunk, err := c.srv.chunks.get()
		if err != nil {
			c.srv.partialBytes.Add(-partialChunkSize)
			c.srv.lg.Error("cannot map memory for a large frame", zap.Error(err))
			return nil, false
		}
		f.chunks = append(f.chunks, chunk)
	}
	chunk := f.chunks[len(f.chunks)-1]
	return chunk[at:min(partialChunkSize, at+f.remaining())], true
}

// largeRoom returns the free part of the last chunk of c's large frame, no
// longer than the bytes still to come (empty: a new chunk is needed).
func (c *Conn) largeRoom() []byte {
	f := c.large
	if f.whole != nil {
		return f.whole.b[protocol.HeaderSize+f.filled : f.size()]
	}
	if f.filled == len(f.chunks)*partialChunkSize {
		return nil
	}
	at := f.filled % partialChunkSize
	return f.chunks[len(f.chunks)-1][at:min(partialChunkSize, at+f.remaining())]
}

// fillLarge copies b, the next bytes of c's large frame (no more than it
// still needs), into its chunks. It reports false when the connection must
// be refused.
func (c *Conn) fillLarge(b []byte) bool {
	for len(b) > 0 {
		dst, ok := c.space()
		if !ok {
			return false
		}
		n := copy(dst, b)
		c.large.filled += n
		b = b[n:]
	}
	return true
}

// startLarge takes b, the buffered start of a frame larger than
// ReadBufferSize (its whole header and perhaps some body), as c's large
// frame in progress. It reports false when the connection must be refused.
func (c *Conn) startLarge(b []byte) bool {
	c.holdSmall(0)
	f := &largeFrame{body: int(decodeHeader(b).BodyLen)}
	copy(f.header[:], b)
	// Only a connection that may send requests reserves a frame whole: a
	// connection not yet authenticated (whose large frame is refused once
	// it is read) counts what it sends.
	if f.size() <= framePoolMaxFrame && c.authenticated() && c.srv.reserveWhole(int64(f.size())) {
		f.whole = c.srv.frames.get(f.size())
		copy(f.whole.b, f.header[:])
	} else {
		c.srv.framesChunked.Add(1)
	}
	c.large = f
	c.framing.Store(true)
	return c.fillLarge(b[protocol.HeaderSize:])
}

// readLarge reads the rest of c's large frame from the socket straight
// into its buffer or its last chunk (largeRoom), until the frame is whole,
// the chunk is full or the socket has nothing more; gnet's next read
// brings what comes later (its poller is level-triggered). A read error
// or the peer's end is left to gnet's next read, which sees it too.
func (c *Conn) readLarge() {
	for {
		room := c.largeRoom()
		if len(room) == 0 {
			return
		}
		n, err := unix.Read(c.fd, room)
		if err == unix.EINTR {
			continue
		}
		if n <= 0 || err != nil {
			return
		}
		c.large.filled += n
		c.received.Add(int64(n))
		if n < len(room) {
			return // the socket is (most likely) empty: no read to find EAGAIN
		}
	}
}

// takeLarge returns c's whole large frame in a buffer from the frame pool
// (header and body, for the handler to own; framepool.go): its own buffer,
// or one its chunks are copied into, and then given back. The copy fills
// the buffer up to the frame's length, so whatever it held before is
// overwritten.
func (c *Conn) takeLarge() *frameBuf {
	f := c.large
	if fb := f.whole; fb != nil {
		f.whole = nil // the handler's now: dropLarge does not pool it
		c.srv.partialBytes.Add(-int64(f.size()))
		c.dropLarge()
		return fb
	}
	fb := c.srv.frames.get(f.size())
	n := copy(fb.b, f.header[:])
	for _, chunk := range f.chunks {
		n += copy(fb.b[n:], chunk)
	}
	c.dropLarge()
	return fb
}

// serveLarge serves c's whole large frame (takeLarge). It reports false
// when the connection must be closed.
func (c *Conn) serveLarge(now time.Time) bool {
	fb := c.takeLarge()
	_, _, ok := c.serveFrames(fb.b, now, fb)
	return ok
}

// dropLarge gives the chunks of c's large frame back, if it has one.
func (c *Conn) dropLarge() {
	f := c.large
	if f == nil {
		return
	}
	if f.whole != nil {
		c.srv.frames.put(f.whole)
		f.whole = nil
		c.srv.partialBytes.Add(-int64(f.size()))
	}
	for i, chunk := range f.chunks {
		c.srv.chunks.put(chunk)
		f.chunks[i] = nil
	}
	c.srv.partialBytes.Add(-int64(len(f.chunks)) * partialChunkSize)
	c.large = nil
	c.framing.Store(false)
}

// holdSmall records that c holds n bytes of a small incomplete frame in
// its read buffer (0: none), counted as n rounded up to a power of two. It
// reports false, counting nothing new, when the growth would pass
// MaxPartialBytes. It runs after every read, so the common case (nothing
// held before or after) costs a comparison.
func (c *Conn) holdSmall(n int) bool {
	held := int64(0)
	if n > 0 {
		held = int64(1) << bits.Len(uint(n-1))
	}
	if held == c.smallHeld {
		return true
	}
	if grow := held - c.smallHeld; grow > 0 {
		if !c.srv.reservePartial(grow) {
			return false
		}
	} else {
		c.srv.partialBytes.Add(grow)
	}
	c.smallHeld = held
	c.framing.Store(held > 0 || c.large != nil)
	return true
}

// refusePartial answers the frame that would pass MaxPartialBytes with
// StatusBusy (on the loop's buffer) and logs why the connection closes;
// the caller closes it, lingering (see linger.go) so that the answer
// reaches a client still sending the frame.
func (c *Conn) refusePartial(requestID uint64) {
	c.srv.closedPartial.Add(1)
	c.lingerAfter = true
	c.loopOut = protocol.AppendResponse(c.loopOut, protocol.StatusBusy, requestID,
		[]byte("netserver: the server holds too many partial frames (MaxPartialBytes); try again later"))
	c.closeReason("partial frames over MaxPartialBytes", zap.Int64("limit", c.srv.opts.MaxPartialBytes))
}

package transport

import (
	"bytes"
	"net"
	"slices"
)

const (
	// writeChunk is the size of a write queue's chunks once it holds more
	// than one: frames queued beyond it go into further chunks (a frame may
	// span two), written together with one writev.
	writeChunk = 1 << 20
	// maxSpareChunks is how many written chunks a connection keeps for
	// reuse.
	maxSpareChunks = 8
	// minBorrow is the smallest body a Call queues without copying it
	// (writeQueue.borrow): below it a copy costs less than an iovec.
	minBorrow = 16 << 10
)

// writeQueue holds the bytes waiting to be written, in order: segments
// (segs), then the unsealed tail of the chunk being filled (cur[mark:]).
// Frames are copied into chunks: a queue that outgrows one chunk takes
// another instead of growing (a growing slice copied everything queued at
// every doubling and zeroed each new array: with 64 requests of 256 KiB
// queued behind a write, that was half a producer's CPU); written chunks
// are kept for reuse. A large body of a Call, whose caller waits, is queued
// as a segment of its own, not copied (borrow; conn.release). Its owner (a
// conn) guards it with its mutex.
type writeQueue struct {
	cur    []byte   // the chunk being filled
	mark   int      // cur[:mark] is in segs already
	segs   [][]byte // queued bytes before cur[mark:]
	chunks [][]byte // chunks with bytes in segs, other than cur
	spare  [][]byte // written chunks kept for reuse
	// takes counts take calls: the take that will include a borrowed
	// segment queued now is takes+1.
	takes uint64
}

// empty reports whether nothing is queued.
func (q *writeQueue) empty() bool { return len(q.segs) == 0 && len(q.cur) == q.mark }

// append queues a copy of b.
func (q *writeQueue) append(b []byte) {
	for len(b) > 0 {
		room := cap(q.cur) - len(q.cur)
		if room < len(b) && (room == 0 || cap(q.cur) < writeChunk) {
			q.grow(len(b))
			room = cap(q.cur) - len(q.cur)
		}
		n := min(room, len(b))
		q.cur = append(q.cur, b[:n]...)
		b = b[n:]
	}
}

// borrow queues b itself and returns its index in segs; b must not change
// until the take that includes it (takes+1 now) has been written, or until
// unborrow copied it.
func (q *writeQueue) borrow(b []byte) int {
	q.seal()
	q.segs = append(q.segs, b)
	return len(q.segs) - 1
}

// unborrow replaces the borrowed segment i, not yet taken, by a copy.
func (q *writeQueue) unborrow(i int) { q.segs[i] = bytes.Clone(q.segs[i]) }

// seal moves cur's unsealed bytes into segs.
func (q *writeQueue) seal() {
	if len(q.cur) > q.mark {
		q.segs = append(q.segs, q.cur[q.mark:])
		q.mark = len(q.cur)
	}
}

// grow makes room for need more bytes, or for some of them when cur is a
// whole chunk.
func (q *writeQueue) grow(need int) {
	switch {
	case cap(q.cur) == 0 && len(q.spare) > 0:
		q.cur = q.popSpare()
	case cap(q.cur) < writeChunk:
		// A small queue grows as a slice does, up to a chunk: a
		// connection with one small request at a time keeps one small
		// buffer. Sealed segments keep pointing into the old array.
		q.cur = slices.Grow(q.cur, min(need, writeChunk-len(q.cur)))
	default:
		q.seal()
		q.chunks = append(q.chunks, q.cur)
		q.mark = 0
		if q.cur = q.popSpare(); cap(q.cur) == 0 {
			q.cur = make([]byte, 0, writeChunk)
		}
	}
}

func (q *writeQueue) popSpare() []byte {
	n := len(q.spare)
	if n == 0 {
		return nil
	}
	b := q.spare[n-1]
	q.spare[n-1] = nil
	q.spare = q.spare[:n-1]
	return b
}

// take moves what is queued to segs and the chunks holding it to chunks
// (both reset first) and returns them; cur starts over on a spare chunk.
func (q *writeQueue) take(segs, chunks [][]byte) ([][]byte, [][]byte) {
	q.seal()
	q.takes++
	segs = append(segs[:0], q.segs...)
	clear(q.segs)
	q.segs = q.segs[:0]
	chunks = append(chunks[:0], q.chunks...)
	clear(q.chunks)
	q.chunks = q.chunks[:0]
	if len(q.cur) > 0 {
		chunks = append(chunks, q.cur)
		q.cur, q.mark = q.popSpare(), 0
	}
	return segs, chunks
}

// recycle keeps written chunks for reuse (up to maxSpareChunks, none
// larger than maxSpareWriteBuffer).
func (q *writeQueue) recycle(chunks [][]byte) {
	for _, b := range chunks {
		if len(q.spare) >= maxSpareChunks {
			return
		}
		if cap(b) <= maxSpareWriteBuffer {
			q.spare = append(q.spare, b[:0])
		}
	}
}

// reset drops everything queued and spare; takes goes on counting.
func (q *writeQueue) reset() { *q = writeQueue{takes: q.takes} }

// writeBuffers writes bufs to nc: one Write for one buffer, else a
// writev (net.Buffers; a TLS connection takes them one Write each). vec is
// scratch space for the buffers' headers, returned for reuse.
func writeBuffers(nc net.Conn, bufs [][]byte, vec net.Buffers) (net.Buffers, error) {
	if len(bufs) == 1 {
		_, err := nc.Write(bufs[0])
		return vec, err
	}
	vec = append(vec[:0], bufs...)
	v := vec // WriteTo consumes v
	_, err := v.WriteTo(nc)
	clear(vec)
	return vec, err
}

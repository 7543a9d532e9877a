package transport

import (
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
)

// writeQueue holds the frames waiting to be written, as a list of chunks.
// A queue that outgrows one chunk takes another instead of growing (a
// growing slice copied everything queued at every doubling and zeroed each
// new array: with 64 requests of 256 KiB queued behind a write, that was
// half a producer's CPU); written chunks are kept for reuse. Its owner (a
// conn) guards it with its mutex.
type writeQueue struct {
	cur   []byte   // the chunk being filled
	full  [][]byte // filled chunks, in order, before cur
	spare [][]byte // written chunks kept for reuse
}

// empty reports whether nothing is queued.
func (q *writeQueue) empty() bool { return len(q.cur) == 0 && len(q.full) == 0 }

// append queues b.
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

// grow makes room for need more bytes, or for some of them when cur is a
// whole chunk.
func (q *writeQueue) grow(need int) {
	switch {
	case cap(q.cur) == 0 && len(q.spare) > 0:
		q.cur = q.popSpare()
	case cap(q.cur) < writeChunk:
		// A small queue grows as a slice does, up to a chunk: a
		// connection with one small request at a time keeps one small
		// buffer.
		q.cur = slices.Grow(q.cur, min(need, writeChunk-len(q.cur)))
	default:
		q.full = append(q.full, q.cur)
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

// take moves what is queued to dst (reset) and returns it; cur starts over
// on a spare chunk.
func (q *writeQueue) take(dst [][]byte) [][]byte {
	dst = append(dst[:0], q.full...)
	clear(q.full)
	q.full = q.full[:0]
	if len(q.cur) > 0 {
		dst = append(dst, q.cur)
		q.cur = q.popSpare()
	}
	return dst
}

// recycle keeps written chunks for reuse (up to maxSpareChunks, none
// larger than maxSpareWriteBuffer).
func (q *writeQueue) recycle(bufs [][]byte) {
	for _, b := range bufs {
		if len(q.spare) >= maxSpareChunks {
			return
		}
		if cap(b) <= maxSpareWriteBuffer {
			q.spare = append(q.spare, b[:0])
		}
	}
}

// reset drops everything, queued and spare.
func (q *writeQueue) reset() { *q = writeQueue{} }

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

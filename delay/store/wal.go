package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// Message log (write-ahead log) record, big-endian:
//
//	0           4           8                 16
//	+-----------+-----------+-----------------+------------------+
//	|  len u32  |  crc u32  | append ms (i64) | message (len B)  |
//	+-----------+-----------+-----------------+------------------+
//
// len is the size of the message, never 0. crc is CRC-32C over the append
// time and the message. The append time is the store clock when the record
// was written; it fixes the schedule hour of a message that was already due
// (max(deliver-at, append time)), so replaying the log again yields the same
// schedule files byte for byte.
//
// Segments are files wal/<20-digit base offset>.wal, preallocated to
// SegmentSize (or to one record when a record is larger). Offsets are global:
// the record at offset o lives in the segment with the largest base <= o, at
// o-base. A writer rolls over when the next record does not fit; the rest of
// the old segment stays zero, and the next segment is named by the offset
// where the old one's data ended, so the offset space has no gaps. A zero len
// marks the end of a segment's data.
const (
	walHeaderSize = 16
	walDir        = "wal"
	walSuffix     = ".wal"
	// walReadChunk is how much the reader reads at a time.
	walReadChunk = 1 << 20
)

// errTorn reports a record that is cut short or fails its checksum.
var errTorn = errors.New("torn or corrupt record")

func segmentName(base int64) string { return fmt.Sprintf("%020d%s", base, walSuffix) }

// listSegments returns the base offsets of the segments in dir, ascending.
func listSegments(dir string) ([]int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var bases []int64
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, walSuffix) || len(name) != 20+len(walSuffix) {
			continue
		}
		b, err := strconv.ParseInt(strings.TrimSuffix(name, walSuffix), 10, 64)
		if err != nil {
			continue
		}
		bases = append(bases, b)
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	return bases, nil
}

// appendWALRecord appends one record to dst.
func appendWALRecord(dst []byte, appendMillis int64, msg []byte) []byte {
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(msg)))
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint64(dst, uint64(appendMillis))
	dst = append(dst, msg...)
	binary.BigEndian.PutUint32(dst[start+4:], protocol.Checksum(dst[start+8:]))
	return dst
}

// walRecord is one record read back; message points into the reader's
// buffer and is valid until the next call.
type walRecord struct {
	offset       int64
	appendMillis int64
	message      []byte
}

// size returns the record's size in the log.
func (r walRecord) size() int64 { return walHeaderSize + int64(len(r.message)) }

// walReader reads records sequentially from a global offset. It reads at
// most up to the limit it is given, so bytes a concurrent writer has not
// finished are never buffered.
type walReader struct {
	dir      string
	maxSize  int64 // largest record the reader accepts
	f        *os.File
	base     int64 // base offset of f
	fileSize int64
	pos      int64 // global offset of the next record
	buf      []byte
	bufOff   int64 // global offset of buf[0]
}

func newWALReader(dir string, pos int64, maxSize int64) *walReader {
	return &walReader{dir: dir, pos: pos, maxSize: maxSize}
}

func (r *walReader) close() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

// open opens the segment holding pos: the one named pos when exact, else the
// largest base <= pos. It reports false when there is none.
func (r *walReader) open(exact bool) (bool, error) {
	base := r.pos
	if !exact {
		bases, err := listSegments(r.dir)
		if err != nil {
			return false, err
		}
		i := sort.Search(len(bases), func(i int) bool { return bases[i] > r.pos })
		if i == 0 {
			return false, nil
		}
		base = bases[i-1]
	}
	f, err := os.Open(filepath.Join(r.dir, segmentName(base)))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return false, err
	}
	r.close()
	r.f, r.base, r.fileSize = f, base, st.Size()
	r.buf, r.bufOff = r.buf[:0], r.pos
	return true, nil
}

// peek returns up to n bytes at pos within the open segment, never past
// limit (limit < 0: no limit). Fewer bytes mean the segment or the limit
// ends first.
func (r *walReader) peek(n int, limit int64) ([]byte, error) {
	if r.pos >= r.bufOff && r.pos-r.bufOff+int64(n) <= int64(len(r.buf)) {
		s := r.pos - r.bufOff
		return r.buf[s : s+int64(n)], nil
	}
	want := int64(n)
	if want < walReadChunk {
		want = walReadChunk
	}
	if avail := r.fileSize - (r.pos - r.base); want > avail {
		want = avail
	}
	if limit >= 0 && want > limit-r.pos {
		want = limit - r.pos
	}
	if want < 0 {
		want = 0
	}
	if int64(cap(r.buf)) < want {
		r.buf = make([]byte, want)
	}
	r.buf = r.buf[:want]
	m, err := r.f.ReadAt(r.buf, r.pos-r.base)
	if err != nil && err != io.EOF {
		return nil, err
	}
	r.buf, r.bufOff = r.buf[:m], r.pos
	if m < n {
		return r.buf, nil
	}
	return r.buf[:n], nil
}

// seek moves the reader back (or on) to pos, a record's start; the next
// call to next reads there.
func (r *walReader) seek(pos int64) {
	r.pos = pos
	if r.f != nil && pos < r.base {
		r.close()
	}
}

// next returns the record at pos and advances past it. It returns ok=false
// with a nil error at the end of the data (or at limit, when limit >= 0),
// and errTorn when the bytes at pos are not a whole valid record.
func (r *walReader) next(limit int64) (walRecord, bool, error) {
	for {
		if limit >= 0 && r.pos >= limit {
			return walRecord{}, false, nil
		}
		if r.f == nil || r.pos < r.base {
			found, err := r.open(false)
			if err != nil || !found {
				return walRecord{}, false, err
			}
		}
		hdr, err := r.peek(walHeaderSize, limit)
		if err != nil {
			return walRecord{}, false, err
		}
		if len(hdr) < walHeaderSize || binary.BigEndian.Uint32(hdr) == 0 {
			// The data of this segment ends here; the next record, if any,
			// opens the segment named by this offset.
			if r.pos == r.base {
				return walRecord{}, false, nil
			}
			found, err := r.open(true)
			if err != nil || !found {
				return walRecord{}, false, err
			}
			continue
		}
		n := int64(binary.BigEndian.Uint32(hdr))
		if n > r.maxSize || r.pos-r.base+walHeaderSize+n > r.fileSize {
			return walRecord{}, false, fmt.Errorf("%w: wal offset %d: length %d", errTorn, r.pos, n)
		}
		if limit >= 0 && r.pos+walHeaderSize+n > limit {
			return walRecord{}, false, nil
		}
		b, err := r.peek(int(walHeaderSize+n), limit)
		if err != nil {
			return walRecord{}, false, err
		}
		if int64(len(b)) < walHeaderSize+n {
			return walRecord{}, false, fmt.Errorf("%w: wal offset %d: short record", errTorn, r.pos)
		}
		if protocol.Checksum(b[8:]) != binary.BigEndian.Uint32(b[4:8]) {
			return walRecord{}, false, fmt.Errorf("%w: wal offset %d: checksum", errTorn, r.pos)
		}
		rec := walRecord{
			offset:       r.pos,
			appendMillis: int64(binary.BigEndian.Uint64(b[8:16])),
			message:      b[walHeaderSize:],
		}
		r.pos += walHeaderSize + n
		return rec, true, nil
	}
}

// walWriter appends to the active segment. It is owned by the store's
// writeLoop.
type walWriter struct {
	dir     string
	segSize int64
	f       *os.File
	base    int64
	pos     int64 // write position within f
	alloc   int64 // preallocated size of f

	create func(dir string, base, segSize, need int64) (*os.File, int64, error) // createSegment unless a test sets it
}

// end returns the global offset after the last written record.
func (w *walWriter) end() int64 { return w.base + w.pos }

// createSegment creates and preallocates the segment with base, sized for at
// least need bytes.
func createSegment(dir string, base, segSize, need int64) (*os.File, int64, error) {
	size := segSize
	if need > size {
		size = need
	}
	f, err := os.OpenFile(filepath.Join(dir, segmentName(base)), os.O_CREATE|os.O_EXCL|os.O_RDWR, fsutil.FileMode)
	if err != nil {
		return nil, 0, err
	}
	if err := preallocate(f, size); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, 0, err
	}
	return f, size, nil
}

// roll retires the active segment (returned for the syncer to sync and
// close) and starts a new one at the current end, sized for need bytes.
func (w *walWriter) roll(need int64) (*os.File, error) {
	create := w.create
	if create == nil {
		create = createSegment
	}
	f, alloc, err := create(w.dir, w.end(), w.segSize, need)
	if err != nil {
		return nil, err
	}
	old := w.f
	w.f, w.base, w.pos, w.alloc = f, w.end(), 0, alloc
	return old, nil
}

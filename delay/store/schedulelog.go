package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// Schedule log record, big-endian; one file per hour of due time, named
// schedule/yyyyMMddHH (UTC):
//
//	0           4           8                  16
//	+-----------+-----------+------------------+------------------+
//	|  len u32  |  crc u32  | wal offset (u64) | message (len B)  |
//	+-----------+-----------+------------------+------------------+
//
// len is the size of the message; crc is CRC-32C over the WAL offset and the
// message. The message is the producer's bytes, unchanged, so the due time is
// at message[16:24]. The WAL offset is where the record came from: records of
// one file are in increasing WAL order, which lets a rebuild without a
// checkpoint skip what a file already holds. A record is addressed by its
// offset in the file; the wheel keeps (due, hour, offset, size) per message.
const (
	scheduleHeaderSize = 16
	scheduleDir        = "schedule"
	dispatchDir        = "dispatch"
	hourMillis         = int64(time.Hour / time.Millisecond)
	hourLayout         = "2006010215"
	// scanChunk is how much a schedule-log scan reads at a time.
	scanChunk = 1 << 20
)

// fileSize returns the size of an *os.File or an fsutil.File.
func fileSize(f io.ReaderAt) (int64, error) {
	switch f := f.(type) {
	case interface{ Size() (int64, error) }:
		return f.Size()
	case interface{ Stat() (os.FileInfo, error) }:
		st, err := f.Stat()
		if err != nil {
			return 0, err
		}
		return st.Size(), nil
	}
	return 0, fmt.Errorf("size of a %T", f)
}

// errTorn reports a schedule or dispatch record that is cut short or fails
// its checksum.
var errTorn = errors.New("torn or corrupt record")

// hourOf returns the hour (since the Unix epoch) holding ms.
func hourOf(ms int64) int64 {
	h := ms / hourMillis
	if ms < 0 && ms%hourMillis != 0 {
		h--
	}
	return h
}

// hourStart returns the first millisecond of hour h.
func hourStart(h int64) int64 { return h * hourMillis }

// hourName returns the file name of hour h: yyyyMMddHH in UTC.
func hourName(h int64) string { return time.UnixMilli(hourStart(h)).UTC().Format(hourLayout) }

// parseHourName parses a file name written by hourName.
func parseHourName(name string) (int64, bool) {
	if len(name) != len(hourLayout) {
		return 0, false
	}
	t, err := time.ParseInLocation(hourLayout, name, time.UTC)
	if err != nil {
		return 0, false
	}
	return hourOf(t.UnixMilli()), true
}

// dueOf returns a message's due time: its deliver-at, with 0 meaning now.
func dueOf(msg []byte) int64 { return int64(binary.BigEndian.Uint64(msg[16:24])) }

// scheduleHour returns the hour file a message goes to: the hour of its due
// time, or of its append time when it was already due then.
func scheduleHour(due, appendMillis int64) int64 {
	if due < appendMillis {
		due = appendMillis
	}
	return hourOf(due)
}

// appendScheduleRecord appends one record to dst.
func appendScheduleRecord(dst []byte, walOffset int64, msg []byte) []byte {
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(msg)))
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint64(dst, uint64(walOffset))
	dst = append(dst, msg...)
	binary.BigEndian.PutUint32(dst[start+4:], protocol.Checksum(dst[start+8:]))
	return dst
}

// checkScheduleRecord validates the record in b (header and message, exactly)
// and returns its message.
func checkScheduleRecord(b []byte) ([]byte, error) {
	if len(b) < scheduleHeaderSize+protocol.MinMessageSize {
		return nil, fmt.Errorf("%w: schedule record of %d bytes", errTorn, len(b))
	}
	if n := int(binary.BigEndian.Uint32(b)); n != len(b)-scheduleHeaderSize {
		return nil, fmt.Errorf("%w: schedule record length %d, want %d", errTorn, n, len(b)-scheduleHeaderSize)
	}
	if protocol.Checksum(b[8:]) != binary.BigEndian.Uint32(b[4:8]) {
		return nil, fmt.Errorf("%w: schedule record checksum", errTorn)
	}
	return b[scheduleHeaderSize:], nil
}

// scheduleScan is what a scan of a schedule file found.
type scheduleScan struct {
	end     int64 // offset after the last valid record
	records int64
	lastWAL int64 // WAL offset of the last valid record, -1 if none
	err     error // why the scan stopped before limit (errTorn or I/O)
}

// scanSchedule reads records of f from offset 0 up to limit (limit < 0: to
// the end of the file) and calls fn for each valid one (fn may be nil). It
// stops at the first invalid record. msg is valid only during fn.
func scanSchedule(f io.ReaderAt, limit int64, maxSize int64, fn func(off int64, msg []byte)) scheduleScan {
	return scanScheduleFrom(f, 0, limit, maxSize, fn)
}

// scanScheduleFrom is scanSchedule from offset from (a record start); the
// result counts the records from there.
func scanScheduleFrom(f io.ReaderAt, from, limit int64, maxSize int64, fn func(off int64, msg []byte)) scheduleScan {
	if fn == nil {
		return scanScheduleWAL(f, from, limit, maxSize, nil)
	}
	return scanScheduleWAL(f, from, limit, maxSize, func(off, _ int64, msg []byte) bool { fn(off, msg); return true })
}

// scanScheduleUntil is scanScheduleFrom that stops once fn returns false
// (a page of the timeline is full: the rest of the file is not read).
func scanScheduleUntil(f io.ReaderAt, from, limit int64, maxSize int64, fn func(off int64, msg []byte) bool) scheduleScan {
	return scanScheduleWAL(f, from, limit, maxSize, func(off, _ int64, msg []byte) bool { return fn(off, msg) })
}

// scanScheduleWAL is scanScheduleFrom whose fn also gets each record's
// message-log offset (its append order); fn returning false ends the scan
// after that record.
func scanScheduleWAL(f io.ReaderAt, from, limit int64, maxSize int64, fn func(off, wal int64, msg []byte) bool) scheduleScan {
	res := scheduleScan{lastWAL: -1}
	if limit < 0 {
		size, err := fileSize(f)
		if err != nil {
			res.err = err
			return res
		}
		limit = size
	}
	buf := make([]byte, 0, scanChunk)
	bufOff := from // file offset of buf[0]
	off := from
	fill := func(n int64) ([]byte, error) {
		if off+n > limit {
			return nil, fmt.Errorf("%w: schedule record at %d runs past %d", errTorn, off, limit)
		}
		if off >= bufOff && off+n <= bufOff+int64(len(buf)) {
			return buf[off-bufOff : off-bufOff+n], nil
		}
		want := n
		if want < scanChunk {
			want = scanChunk
		}
		if want > limit-off {
			want = limit - off
		}
		if int64(cap(buf)) < want {
			buf = make([]byte, want)
		}
		buf = buf[:want]
		m, err := f.ReadAt(buf, off)
		if err != nil && err != io.EOF {
			return nil, err
		}
		buf, bufOff = buf[:m], off
		if int64(m) < n {
			return nil, fmt.Errorf("%w: schedule file ends inside the record at %d", errTorn, off)
		}
		return buf[:n], nil
	}
	for off < limit {
		hdr, err := fill(scheduleHeaderSize)
		if err != nil {
			res.err = err
			break
		}
		n := int64(binary.BigEndian.Uint32(hdr))
		if n < protocol.MinMessageSize || n > maxSize {
			res.err = fmt.Errorf("%w: schedule record at %d has length %d", errTorn, off, n)
			break
		}
		rec, err := fill(scheduleHeaderSize + n)
		if err != nil {
			res.err = err
			break
		}
		msg, err := checkScheduleRecord(rec)
		if err != nil {
			res.err = fmt.Errorf("at %d: %w", off, err)
			break
		}
		more := fn == nil || fn(off, int64(binary.BigEndian.Uint64(rec[8:16])), msg)
		res.records++
		res.lastWAL = int64(binary.BigEndian.Uint64(rec[8:16]))
		off += scheduleHeaderSize + n
		if !more {
			break
		}
	}
	res.end = off
	return res
}

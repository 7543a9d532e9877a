package store

import (
	"encoding/binary"
	"fmt"
	"path/filepath"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/segment"
)

// Message log: a pkg/segment Log in dir/log (files <20-digit base>.seg,
// preallocated to SegmentSize; a record larger than that gets a segment of
// its own). Every record is of kind logKindMessage and its payload is
//
//	0                 8
//	+-----------------+----------------------------------------+
//	| append ms (i64) | message, or control record (control.go) |
//	+-----------------+----------------------------------------+
//
// behind pkg/segment's 12-byte header (magic, version, kind, length,
// CRC-32C over the header and the payload). The append time is the store
// clock when the record was written; it fixes the schedule hour of a
// message that was already due (max(deliver-at, append time)), so
// replaying the log again yields the same schedule files byte for byte.
// Offsets are pkg/segment's: global, a record never spans two segments.
const (
	logDir         = "log"
	logKindMessage = 1
	appendTimeSize = 8
	// logRecordOverhead is what a record adds to the message it carries.
	logRecordOverhead = segment.HeaderSize + appendTimeSize
)

// logOptions are the message log's options: pwrite rather than a mapping
// (writeLoop must not wait behind syncLoop's fdatasync on a page fault, see
// pkg/segment's doc), and records as large as the readers accept.
func logOptions(opts Options, fs fsutil.FS) segment.LogOptions {
	return segment.LogOptions{
		FS:            fs,
		SegmentSize:   opts.SegmentSize,
		NoMmap:        true,
		LargeRecords:  true,
		MaxRecordSize: maxRecordSize + logRecordOverhead,
	}
}

// openMessageLog opens the message log of the store in dir.
func openMessageLog(dir string, opts Options, fs fsutil.FS) (*segment.Log, error) {
	return segment.OpenLog(filepath.Join(dir, logDir), logOptions(opts, fs))
}

// appendTime returns the 8-byte head of a record written at ms.
func appendTime(dst []byte, ms int64) []byte {
	return binary.BigEndian.AppendUint64(dst[:0], uint64(ms))
}

// logRecord is one message-log record read back; message aliases the
// reader's buffer until the next read.
type logRecord struct {
	offset       int64
	appendMillis int64
	message      []byte
}

// parseLogRecord splits a record's payload.
func parseLogRecord(off int64, kind uint8, payload []byte) (logRecord, error) {
	if kind != logKindMessage || len(payload) < appendTimeSize+controlSize {
		return logRecord{}, fmt.Errorf("%w: message-log record at %d: kind %d, %d bytes", ErrCorrupt, off, kind, len(payload))
	}
	return logRecord{
		offset:       off,
		appendMillis: int64(binary.BigEndian.Uint64(payload)),
		message:      payload[appendTimeSize:],
	}, nil
}

// nextRecord reads the next record below limit; ok is false when there is
// none yet.
func nextRecord(r *segment.Reader, limit int64) (logRecord, bool, error) {
	off, kind, payload, ok, err := r.Next(limit)
	if err != nil || !ok {
		return logRecord{}, false, err
	}
	rec, err := parseLogRecord(off, kind, payload)
	return rec, err == nil, err
}

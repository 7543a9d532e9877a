package store

import (
	"encoding/binary"
	"fmt"
)

// Message-log record: a segment record (magic u16 | version u8 | kind u8 |
// length u32 | crc32c u32, see pkg/segment) of kind recordMessage whose
// payload is
//
//	0                 8                 16
//	+-----------------+-----------------+---------------------------------+
//	| subject seq i64 | timestamp ms i64| message (as the producer sent it)|
//	+-----------------+-----------------+---------------------------------+
//
// so the whole record header is 28 bytes: magic and version, length, the
// CRC-32C (over header and payload), the subject's consume-log sequence and
// the append time. The message keeps its own CRC-32C, checked again by every
// reader of the message. The appender derives the record's CRC from the
// message's (checked on the way in, it covers all of the message but its
// first 4 bytes: segment.Batch.AppendSummed) instead of a second pass over
// the message's bytes; the bytes written are the same, and a message whose
// CRC were wrong would make a record that fails its check.
const (
	recordMessage   uint8 = 1
	recordHeadSize        = 16
	recordOverhead        = 12 + recordHeadSize
	recordMsgOffset       = recordOverhead
)

func putRecordHead(b []byte, seq, ts int64) {
	binary.BigEndian.PutUint64(b[0:], uint64(seq))
	binary.BigEndian.PutUint64(b[8:], uint64(ts))
}

func parseRecordPayload(p []byte) (seq, ts int64, msg []byte, err error) {
	if len(p) < recordHeadSize {
		return 0, 0, nil, fmt.Errorf("%w: message record of %d bytes", ErrCorrupt, len(p))
	}
	return int64(binary.BigEndian.Uint64(p[0:])), int64(binary.BigEndian.Uint64(p[8:])), p[recordHeadSize:], nil
}

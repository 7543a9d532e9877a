package store

import "encoding/binary"

// Control record: a message-log record that is not a message. Its bytes
// take the place of the message in the record (messagelog.go), so the log's CRC,
// group commit and recovery treat it like any other record:
//
//	0                 4     5      6        8                16                24
//	+-----------------+-----+------+--------+----------------+-----------------+
//	| 0xFFFFFFFF      | ver | kind |   0    |   hour (i64)   | offset (i64)    |
//	+-----------------+-----+------+--------+----------------+-----------------+
//
// ver is controlVersion, a value no message has (messages carry
// protocol.MessageVersion at byte 4 and are checked on the way in). kind
// controlCancel: the message at offset of hour's schedule file is cancelled;
// the replay turns it into a cancel entry of that hour's dispatch log
// (dispatchlog.go), which is what the hour's loads skip and what a slave
// copies. kind controlReschedule: the same, and the record goes on with a
// whole message (the cancelled one with its new due time) that the replay
// stores like an appended one — one record, so a crash keeps both or
// neither.
const (
	controlSize       = 24
	controlVersion    = 0xCC
	controlCancel     = 1
	controlReschedule = 2
)

func appendControl(dst []byte, kind byte, hour, offset int64) []byte {
	dst = append(dst, 0xFF, 0xFF, 0xFF, 0xFF, controlVersion, kind, 0, 0)
	dst = binary.BigEndian.AppendUint64(dst, uint64(hour))
	return binary.BigEndian.AppendUint64(dst, uint64(offset))
}

// isControl reports whether a message-log record's payload is a control
// record.
func isControl(msg []byte) bool {
	return len(msg) >= controlSize && msg[4] == controlVersion && msg[0]&msg[1]&msg[2]&msg[3] == 0xFF
}

// controlMessage returns the message a reschedule record carries (nil for
// other kinds).
func controlMessage(msg []byte) []byte {
	if msg[5] != controlReschedule || len(msg) <= controlSize {
		return nil
	}
	return msg[controlSize:]
}

// parseControl returns a control record's fields.
func parseControl(msg []byte) (kind byte, hour, offset int64) {
	return msg[5], int64(binary.BigEndian.Uint64(msg[8:16])), int64(binary.BigEndian.Uint64(msg[16:24]))
}

// Package protocol is the one wire protocol of QMQ-Go: every TCP conversation
// (client↔broker, client↔meta server, broker↔meta server, delay→realtime,
// slave→master) is a stream of frames in this format. It imports nothing of
// the project and no networking package; it encodes to and decodes from byte
// slices, so it serves servers (pkg/netserver), clients (pkg/transport) and
// storage alike.
//
// # Frames
//
// Every frame is an 18-byte header and a body (all integers big-endian):
//
//	0       2       3       4       6                       14              18
//	+-------+-------+-------+-------+-----------------------+---------------+
//	| magic |version| flags | code  |      request id       |  body length  |
//	|  u16  |  u8   |  u8   |  u16  |          u64          |      u32      |
//	+-------+-------+-------+-------+-----------------------+---------------+
//
// magic is 0x514D ("QM"), version is 1. flags bit0 marks a response, bit1 a
// one-way request. In a request code is a Command; in a response it is a
// Status. A response echoes its request's id, so many requests may be in
// flight on one connection and answered in any order. A frame with a bad
// magic, an unknown version, unknown flags or a body over the maximum frame
// size (DefaultMaxFrameSize unless configured) cannot be trusted: the reader
// closes the connection. An unknown command is answered with
// StatusUnknownCommand and the connection stays open. The body of a non-OK
// response is a UTF-8 message for people.
//
// # Messages
//
// A message is encoded once, by its producer, and stored and served as those
// same bytes; its CRC-32C is checked on receive and on every read-back:
//
//	0        4     5       6          8                16                24
//	+--------+-----+-------+----------+----------------+-----------------+
//	| crc32c | ver | flags | attempts |  created (ms)  | deliver at (ms) |
//	|  u32   | u8  |  u8   |   u16    |      i64       |       i64       |
//	+--------+-----+-------+----------+----------------+-----------------+
//	24: subject len u8 | subject | id len u8 | id
//	    tag count u8   | tag count × (tag len u8 | tag)
//	    prop count u16 | prop count × (key len u16 | key | value len u32 | value)
//	    body len u32   | body
//
// ParseMessage returns a View that points into the bytes without copying;
// DecodeMessage copies into a Message. Limits (DefaultLimits: body ≤ 4 MiB,
// subject ≤ 200 bytes of [A-Za-z0-9._-], ≤ 10 tags of ≤ 64 bytes) are checked
// by AppendMessage on the client and CheckView on the server. Subjects that
// start with % are system subjects: %RETRY%<subject>%<group> and
// %DEAD%<subject>%<group>.
//
// # Bodies
//
//	send request   epoch u64 | count u32 | count × (len u32 | message)
//	send response  count u32 | count × status u16       (one per message, in order)
//	pull request   subject s8 | group s8 | consumer s8 | max u32 | timeout ms u32 |
//	               flags u8 | known pull seq i64 | tag mode u8 | tag count u8 | tags s8…
//	               (flags: 1 broadcast, 2 earliest, 4 pipelined; other bits are rejected)
//	pull response  count u32 | count × (pull seq u64 | consume seq u64 | len u32 | message)
//	ack request    subject s8 | group s8 | consumer s8 | flags u8 | first u64 | last u64
//	               (flags: 1 broadcast, 2 release, 4 list: count u16 | count × pull seq u64
//	               instead of first and last, each seq one message's ack)
//
// s8 is a u8 length and that many bytes. Each body's decoder rejects
// truncated input and trailing bytes; every decoder has a fuzz target.
//
// # Errors
//
// Every non-OK Status has a sentinel *Error (ErrReadonly, ErrTooLarge, …);
// a received failure is an *Error with that status and the server's message,
// so errors.Is(err, protocol.ErrReadonly) holds. Status.Retryable says which
// failures may succeed when sent again or elsewhere.
package protocol

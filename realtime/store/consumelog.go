package store

import (
	"encoding/binary"
	"hash/crc32"
)

// Consume-log entry, 40 bytes, big-endian; entry n of a subject sits at byte
// n×40 of its consume log:
//
//	0                8          12         16               24               32               40
//	+----------------+----------+----------+----------------+----------------+----------------+
//	| message offset |   size   |  crc32c  | timestamp (ms) | deliver at (ms)|    tag bloom   |
//	|      i64       |   u32    |   u32    |      i64       |      i64       |      u64       |
//	+----------------+----------+----------+----------------+----------------+----------------+
//
// message offset and size locate the whole message-log record (header
// included). crc32c covers bytes 0..12 and 16..40 so a torn or stale entry is
// recognised. timestamp is the append time; deliver at is copied from the
// message (0 = now) so pulls can hold messages until they are due without
// reading them; tag bloom is tagBloom of the message's tags. A hole (an entry
// whose message was lost to corruption) has size 0.
const entryWidth = 40

type entry struct {
	offset    int64
	size      uint32
	timestamp int64
	deliverAt int64
	bloom     uint64
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (e *entry) put(b []byte) {
	// The fields the CRC covers are first written contiguously (the last
	// three at 12..36), so one crc32.Update covers them, then moved up to
	// make room for the CRC: two calls cost a dispatch each, per message
	// on master and slave alike, and a scratch array would escape to the
	// heap through crc32.Update.
	_ = b[entryWidth-1]
	binary.BigEndian.PutUint64(b[0:], uint64(e.offset))
	binary.BigEndian.PutUint32(b[8:], e.size)
	binary.BigEndian.PutUint64(b[12:], uint64(e.timestamp))
	binary.BigEndian.PutUint64(b[20:], uint64(e.deliverAt))
	binary.BigEndian.PutUint64(b[28:], e.bloom)
	crc := crc32.Update(0, castagnoli, b[0:36])
	copy(b[16:40], b[12:36])
	binary.BigEndian.PutUint32(b[12:], crc)
}

// decodeEntry reads an entry and reports whether its CRC holds.
func decodeEntry(b []byte) (entry, bool) {
	e := entry{
		offset:    int64(binary.BigEndian.Uint64(b[0:])),
		size:      binary.BigEndian.Uint32(b[8:]),
		timestamp: int64(binary.BigEndian.Uint64(b[16:])),
		deliverAt: int64(binary.BigEndian.Uint64(b[24:])),
		bloom:     binary.BigEndian.Uint64(b[32:]),
	}
	crc := crc32.Update(0, castagnoli, b[0:12])
	crc = crc32.Update(crc, castagnoli, b[16:40])
	return e, crc == binary.BigEndian.Uint32(b[12:])
}

// tagBloom sets two bits per tag in a 64-bit bloom filter. A pull with a
// tag filter skips entries whose bloom cannot match and checks the message
// itself for the rest, so false positives never leak through.
func tagBloom(tag []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range tag {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return 1<<(h&63) | 1<<((h>>6)&63)
}

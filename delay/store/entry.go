package store

import "fmt"

// entry is what the wheel keeps per message besides its due time: 12 bytes
// of 32-bit words, so that a wheel slot entry (pkg/timewheel adds the due
// time as a 32-bit offset in its tick) is 16 bytes and holds no pointer
// (the wheel keeps large slots outside the Go heap).
//
//	0       4                     7        8       12
//	+-------+---------------------+--------+-------+
//	| off lo| hour (signed 24 bit)| off hi | size  |
//	+-------+---------------------+--------+-------+
//	off lo, off hi: bits 0–31 and 32–39 of the record's offset in its hour file
//	hour:           hours since the Unix epoch (±957 years)
//	size:           the message's length
//
// The replay refuses to grow an hour file past maxScheduleFile, or to write
// an hour outside minEntryHour..maxEntryHour, so every record has an entry.
type entry struct {
	offLo  uint32
	hourHi uint32 // hour<<8 | offset>>32
	size   uint32
}

const (
	// maxScheduleFile is the most bytes one hour file may hold: 1 TiB.
	maxScheduleFile = 1 << 40
	minEntryHour    = -1 << 23
	maxEntryHour    = 1<<23 - 1
)

func newEntry(hour, offset int64, size int) entry {
	if hour < minEntryHour || hour > maxEntryHour || offset < 0 || offset >= maxScheduleFile {
		panic(fmt.Sprintf("delay/store: no wheel entry for hour %d offset %d", hour, offset))
	}
	return entry{offLo: uint32(offset), hourHi: uint32(hour)<<8 | uint32(offset>>32), size: uint32(size)}
}

func (e entry) hour() int64 { return int64(int32(e.hourHi) >> 8) }

func (e entry) offset() int64 { return int64(e.hourHi&0xff)<<32 | int64(e.offLo) }

// entryFits reports whether a record of size bytes (header included) at
// offset of hour h can have a wheel entry.
func entryFits(h, offset, size int64) bool {
	return h >= minEntryHour && h <= maxEntryHour && offset+size <= maxScheduleFile
}

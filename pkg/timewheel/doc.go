// Package timewheel is a hashed timing wheel for many timers that fire at
// exact millisecond times. It imports nothing of the project.
//
// Time is cut into ticks (500 ms for the delay server). The wheel has a power
// of two number of slots; an entry due in tick t lives in slot t mod slots as
// long as t is within one rotation of the wheel's current tick, so a slot only
// ever holds entries of one tick and keeps each entry's due time as a 32-bit
// offset from the start of that tick. Entries due further out wait in an
// overflow min-heap and move into their slot when the wheel turns close
// enough; entries whose tick has already passed when they are added (late:
// due in the past, or a clock that went back) wait in a second min-heap, and
// come out before anything in the slots (they are due earlier).
//
// A tick is only the unit of hashing, not the precision: Expire(now) fires an
// entry only when its due time is <= now, in due-time order, and NextDue says
// exactly when the next entry falls due, so the owner can sleep precisely
// until then. A slot is sorted by due time the first time the wheel looks into
// it, and consumed from the front, so a slot holding a million entries due in
// the same second costs one sort and then O(1) per entry; a slot spanning
// several chunks is sorted by counting its offsets (O(entries + tick) when
// the tick is at most 65.5 s and the slot dense enough), keeping entries of
// the same due time in the order they were added.
//
// A Wheel is not safe for concurrent use: its owner serialises access (the
// delay store holds its mutex around every call) and keeps one timer set to
// NextDue.
//
// Memory: a slot entry costs 4 bytes plus the size of T (with T's alignment:
// 16 bytes for a 12-byte T of 32-bit fields); the heaps' entries 8 bytes plus
// T. Slots keep their entries in fixed-size chunks of one page (slot.go,
// chunks.go), so adding never copies and a slot leaves at most the rest of
// one chunk unwritten. When T holds no pointers the chunks are carved from
// 4 MiB anonymous mappings outside the Go heap (mmap; memory.go): the garbage
// collector neither scans them nor needs headroom for them. A chunk whose
// entries have all fired goes back to the wheel's pool, which keeps a few
// resident for reuse (at most an eighth of those in use, or 256) and
// returns the pages of the rest to the system (madvise). Otherwise chunks
// come from the Go heap. Free drops every entry and unmaps everything.
package timewheel

// Package timewheel is a hashed timing wheel for many timers that fire at
// exact millisecond times. It imports nothing of the project.
//
// Time is cut into ticks (500 ms for the delay server). The wheel has a power
// of two number of slots; an entry due in tick t lives in slot t mod slots as
// long as t is within one rotation of the wheel's current tick. Entries due
// further out wait in an overflow min-heap and move into their slot when the
// wheel turns close enough, so a slot only ever holds entries of one tick
// (plus, in the current slot, entries that were already due when added).
//
// A tick is only the unit of hashing, not the precision: Expire(now) fires an
// entry only when its due time is <= now, in due-time order, and NextDue says
// exactly when the next entry falls due, so the owner can sleep precisely
// until then. A slot is sorted by due time the first time the wheel looks into
// it, and consumed from the front, so a slot holding a million entries due in
// the same second costs one sort and then O(1) per entry.
//
// A Wheel is not safe for concurrent use: its owner serialises access (the
// delay store holds its mutex around every call) and keeps one timer set to
// NextDue.
//
// Memory: each entry costs 8 bytes of due time plus the size of T in its
// slot's slice; an emptied slot whose slice grew past a few thousand entries
// releases it, so a burst does not pin memory after it has fired.
package timewheel

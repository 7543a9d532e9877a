package realtime

// pendingKeys is the set of dedupe keys whose messages are stored but not
// yet in the slave's copy (--wait-slave), each with the slave offset that
// settles it (its message's end). A resent copy of such a message is
// answered StatusBusy, not StatusDuplicate (see replyStored).
//
// Every stored message of a waiting reply passes through it, so adding
// must cost little (a Go map's insert and delete cost the master a
// twentieth of its time under --wait-slave): two generations of
// open-addressing tables of (key, need) slots with linear probing, as the
// dedupe window keeps its hashes. Keys go to the current table; when it is
// half full and every key of the previous one is settled (its highest need
// is at or below the slave's offset), the previous one is cleared and
// becomes the current one. Nothing is deleted one by one. While the
// previous table still holds pending keys (the slave lags by more than a
// table), the current one doubles instead, moving its pending keys. Memory
// is 16 bytes a slot: 2 × 128 KiB with the replies a few producers keep in
// flight, and a few times 16 bytes a waiting message when the slave lags
// (the sync service bounds the waiting replies); shrink drops large
// tables once nothing is pending.
//
// A cut lowers the slave's acknowledged offset, but never below a stored
// message's end (it goes back to the master's committed end), so a key it
// settled stays settled and forgetting it is safe; a key still in a table
// whose need a cut brings back above the offset merely answers StatusBusy,
// which a producer retries. Key 0 is stored as 1 (the collision costs the
// same false StatusBusy at worst).
//
// It does not lock: the sync service guards it with dupMu.
type pendingKeys struct {
	cur, prev pendingTable
}

// pendingTable is one generation: at most half full.
type pendingTable struct {
	slots   []pendingSlot
	mask    uint64
	used    int
	maxNeed int64 // the highest need added
}

type pendingSlot struct {
	key  uint64 // 0: empty
	need int64  // the slave offset that settles key
}

// minPendingSlots is the smallest table: 128 KiB, room for the keys of 16
// waiting replies of 256 messages.
const minPendingSlots = 1 << 13

// add records that k is settled once the slave's offset reaches need; a
// key already there takes the higher need. settled is the slave's offset
// now.
func (p *pendingKeys) add(k uint64, need, settled int64) {
	if p.cur.used >= len(p.cur.slots)/2 {
		switch {
		case p.cur.slots == nil:
			p.cur.init(minPendingSlots)
		case p.prev.used == 0 || p.prev.maxNeed <= settled:
			p.cur, p.prev = p.prev, p.cur
			if len(p.cur.slots) == 0 {
				p.cur.init(minPendingSlots)
			} else {
				p.cur.reset()
			}
		default:
			var t pendingTable
			t.init(2 * len(p.cur.slots))
			for i := range p.cur.slots {
				if s := &p.cur.slots[i]; s.key != 0 && s.need > settled {
					t.put(s.key, s.need, settled)
				}
			}
			p.cur = t
		}
	}
	p.cur.put(max(k, 1), need, settled)
}

// pending reports whether k waits for an offset the slave has not reached.
func (p *pendingKeys) pending(k uint64, settled int64) bool {
	k = max(k, 1)
	return p.cur.need(k) > settled || p.prev.need(k) > settled
}

// len returns how many keys wait for an offset past settled (a full scan,
// for tests).
func (p *pendingKeys) len(settled int64) int {
	n := 0
	for _, t := range []*pendingTable{&p.cur, &p.prev} {
		for i := range t.slots {
			if s := &t.slots[i]; s.key != 0 && s.need > settled {
				n++
			}
		}
	}
	return n
}

// shrink drops tables larger than the smallest once every key is settled.
func (p *pendingKeys) shrink(settled int64) {
	if (len(p.cur.slots) > minPendingSlots || len(p.prev.slots) > minPendingSlots) &&
		(p.cur.used == 0 || p.cur.maxNeed <= settled) && (p.prev.used == 0 || p.prev.maxNeed <= settled) {
		*p = pendingKeys{}
	}
}

func (t *pendingTable) init(size int) {
	*t = pendingTable{slots: make([]pendingSlot, size), mask: uint64(size - 1), maxNeed: -1}
}

func (t *pendingTable) reset() {
	clear(t.slots)
	t.used, t.maxNeed = 0, -1
}

// put adds k (not 0); the table has an empty slot.
func (t *pendingTable) put(k uint64, need, settled int64) {
	t.maxNeed = max(t.maxNeed, need)
	for i := k & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		switch s.key {
		case k:
			if s.need <= settled || need > s.need {
				s.need = need
			}
			return
		case 0:
			*s = pendingSlot{key: k, need: need}
			t.used++
			return
		}
	}
}

// need returns k's need, or -1.
func (t *pendingTable) need(k uint64) int64 {
	if t.slots == nil {
		return -1
	}
	for i := k & t.mask; ; i = (i + 1) & t.mask {
		switch s := &t.slots[i]; s.key {
		case k:
			return s.need
		case 0:
			return -1
		}
	}
}

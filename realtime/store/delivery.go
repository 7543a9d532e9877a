package store

import (
	"sort"
	"time"
)

// Delivery states of a stored message in one consumer group
// (Lookup.Deliveries).
const (
	// DeliveryWaiting: the group has not taken it yet (its cursor is not
	// past it, or a dead consumer's entries were handed back with it).
	DeliveryWaiting = "waiting"
	// DeliveryUnacked: a consumer of the group took it and has not acked it.
	DeliveryUnacked = "unacked"
	// DeliveryDone: the group took it and no consumer holds it: acked (or
	// skipped by the group's tag filter). Who acked it and when is not kept
	// once pull logs are trimmed.
	DeliveryDone = "done"
)

// maxDeliveryScan bounds the un-acked pull-log entries read per consumer.
const maxDeliveryScan = 1 << 16

// Delivery is where a stored message stands in one consumer group.
type Delivery struct {
	Group    string
	State    string // DeliveryWaiting, DeliveryUnacked, DeliveryDone
	Consumer string // DeliveryUnacked: who holds it
	PullSeq  int64  // DeliveryUnacked: its pull sequence there
	LastSeen time.Time
}

// deliveries is Lookup.Deliveries.
func (s *Store) deliveries(subject string, seq int64) ([]Delivery, error) {
	s.groupsMu.RLock()
	var groups []*group
	for k, g := range s.groups {
		if k.subject == subject && !k.broadcast {
			groups = append(groups, g)
		}
	}
	s.groupsMu.RUnlock()
	sort.Slice(groups, func(i, j int) bool { return groups[i].key.group < groups[j].key.group })
	var out []Delivery
	for _, g := range groups {
		d, err := g.delivery(seq)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func (g *group) delivery(seq int64) (Delivery, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	d := Delivery{Group: g.key.group}
	if seq >= g.cursor {
		d.State = DeliveryWaiting
		return d, nil
	}
	for _, r := range g.returned {
		if r.start >= 0 && seq >= r.start && seq < r.start+int64(r.count) {
			d.State = DeliveryWaiting
			return d, nil
		}
	}
	for _, c := range g.consumers {
		from := c.acked + 1
		n := min(c.next-from, maxDeliveryScan)
		if n <= 0 || c.log == nil {
			continue
		}
		seqs, err := c.readPullLog(from, n)
		if err != nil {
			return d, err
		}
		for i, v := range seqs {
			if v == seq {
				return Delivery{Group: g.key.group, State: DeliveryUnacked, Consumer: c.id, PullSeq: from + int64(i), LastSeen: c.seen}, nil
			}
		}
	}
	d.State = DeliveryDone
	return d, nil
}

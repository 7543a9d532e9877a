package transport

import "testing"

// Calls are found by id whether they sit in the ring or, when an older
// call still holds their slot, in the overflow map; a stale id finds
// nothing, even where another call now holds its slot.
func TestPendingCalls_RingAndOverflow(t *testing.T) {
	var p pendingCalls
	const n = 3*pendingRingSize + 7
	calls := map[uint64]*call{}
	// The oldest call stays pending while the ids wrap around it twice.
	for id := uint64(1); id <= n; id++ {
		cl := &call{id: id}
		calls[id] = cl
		p.put(id, cl)
		if id > 1 && id%3 == 0 { // some answered early
			if got := p.take(id); got != cl {
				t.Fatalf("take(%d) = %v", id, got)
			}
			delete(calls, id)
		}
	}
	if p.len() != len(calls) || len(p.over) == 0 {
		t.Fatalf("len %d (want %d), overflow %d", p.len(), len(calls), len(p.over))
	}
	if p.get(3) != nil || p.take(3) != nil {
		t.Fatal("an answered id was found again")
	}
	if p.get(n+pendingRingSize) != nil {
		t.Fatal("an id never sent was found")
	}
	seen := 0
	p.each(func(id uint64, cl *call) {
		if calls[id] != cl || cl.id != id {
			t.Fatalf("each gave %d → %v", id, cl)
		}
		seen++
	})
	if seen != len(calls) {
		t.Fatalf("each saw %d of %d", seen, len(calls))
	}
	for id, cl := range calls {
		if id%2 == 0 {
			continue
		}
		if got := p.get(id); got != cl {
			t.Fatalf("get(%d) = %v", id, got)
		}
		if got := p.take(id); got != cl {
			t.Fatalf("take(%d) = %v", id, got)
		}
		delete(calls, id)
	}
	rest := p.drain()
	if len(rest) != len(calls) || p.len() != 0 || p.get(2) != nil {
		t.Fatalf("drain gave %d of %d; %d left", len(rest), len(calls), p.len())
	}
}

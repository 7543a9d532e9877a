package transport

// pendingRingSize is the calls a connection finds by request id without a
// map: a call sits in ring slot id mod pendingRingSize unless an older call
// still holds that slot (over pendingRingSize requests later), when it goes
// to the overflow map. Request ids count up per connection, so a pipelined
// window of up to this many calls (an AckEach consumer keeps 1,024 acks in
// flight) costs an array index per call; the map it replaced cost a
// consumer acking each message about a tenth of its CPU (hashing, probing
// past the deleted entries of its churn).
const pendingRingSize = 1024

// pendingCalls are a connection's calls waiting for their responses, by
// request id. It is guarded by its conn's mu.
type pendingCalls struct {
	ring [pendingRingSize]*call
	over map[uint64]*call // calls whose ring slot was taken when they were sent
	n    int
}

// put adds cl, whose id is id.
func (p *pendingCalls) put(id uint64, cl *call) {
	slot := &p.ring[id%pendingRingSize]
	if *slot == nil {
		*slot = cl
	} else {
		if p.over == nil {
			p.over = make(map[uint64]*call)
		}
		p.over[id] = cl
	}
	p.n++
}

// get returns the call with id, or nil.
func (p *pendingCalls) get(id uint64) *call {
	if cl := p.ring[id%pendingRingSize]; cl != nil && cl.id == id {
		return cl
	}
	return p.over[id]
}

// take removes the call with id and returns it, or nil.
func (p *pendingCalls) take(id uint64) *call {
	slot := &p.ring[id%pendingRingSize]
	if cl := *slot; cl != nil && cl.id == id {
		*slot = nil
		p.n--
		return cl
	}
	cl, ok := p.over[id]
	if !ok {
		return nil
	}
	delete(p.over, id)
	p.n--
	return cl
}

// len returns the number of pending calls.
func (p *pendingCalls) len() int { return p.n }

// each calls f for every pending call, in no order; f may take the call.
func (p *pendingCalls) each(f func(id uint64, cl *call)) {
	if p.n == 0 {
		return
	}
	for _, cl := range p.ring {
		if cl != nil {
			f(cl.id, cl)
		}
	}
	for id, cl := range p.over {
		f(id, cl)
	}
}

// drain removes every pending call and returns them.
func (p *pendingCalls) drain() []*call {
	out := make([]*call, 0, p.n)
	p.each(func(_ uint64, cl *call) { out = append(out, cl) })
	clear(p.ring[:])
	p.over, p.n = nil, 0
	return out
}

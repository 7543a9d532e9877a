package failover

import (
	"fmt"
	"sync/atomic"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// Gate answers a server's hot path "may I take and acknowledge a write
// now?" with an atomic load (two while a lease bounds the writes). The
// role loop sets it; servers ask Open before they take a write and, where
// a lease bounds it (async mode), again before they acknowledge one.
type Gate struct {
	group string
	state atomic.Uint32 // protocol.WriteState; 0 (unknown) for a slave
	until atomic.Int64  // Now deadline while writable under a lease (0: none)
	why   atomic.Pointer[string]
	lead  atomic.Pointer[string] // the group's master as last known (for refusals)
}

// NewGate returns a closed gate (a slave's) for group's refusals.
func NewGate(group string) *Gate {
	g := &Gate{group: group}
	why := "this broker is not its master"
	g.why.Store(&why)
	return g
}

// OpenGate returns a gate open for good: a master nobody else can replace
// (no meta servers, no failover).
func OpenGate(group string) *Gate {
	g := NewGate(group)
	g.set(protocol.WriteAlone, 0, "standalone")
	return g
}

// Open reports whether writes may be taken and acknowledged now.
func (g *Gate) Open() bool {
	switch protocol.WriteState(g.state.Load()) {
	case protocol.WriteAlone:
		return true
	case protocol.WriteWritable:
		u := g.until.Load()
		return u == 0 || Now() < u
	}
	return false
}

// State returns the gate's write state (WriteUnknown on a slave); a lease
// that ran out shows as WriteFenced.
func (g *Gate) State() protocol.WriteState {
	s := protocol.WriteState(g.state.Load())
	if s == protocol.WriteWritable {
		if u := g.until.Load(); u != 0 && Now() >= u {
			return protocol.WriteFenced
		}
	}
	return s
}

// Err is the refusal of a write the gate does not let through (nil when
// open): StatusReadonly while the group is readonly (producers send
// elsewhere), StatusNotMaster otherwise, naming the master when known.
func (g *Gate) Err() error {
	if g.Open() {
		return nil
	}
	why := *g.why.Load()
	s := g.State()
	if s == protocol.WriteReadonly {
		return protocol.Errorf(protocol.StatusReadonly, fmt.Sprintf("group %s is readonly: %s", g.group, why))
	}
	if s == protocol.WriteWritable || s == protocol.WriteFenced && g.until.Load() != 0 {
		why = "neither its meta lease nor its slave lease holds"
	}
	msg := fmt.Sprintf("group %s: %s", g.group, why)
	if lead := g.lead.Load(); lead != nil && *lead != "" {
		msg += "; master " + *lead
	}
	return protocol.Errorf(protocol.StatusNotMaster, msg)
}

// set changes the gate: state with its deadline (0: none) and reason.
func (g *Gate) set(s protocol.WriteState, until int64, why string) {
	g.why.Store(&why)
	g.until.Store(until)
	g.state.Store(uint32(s))
}

// setLeader records the group's master for refusals.
func (g *Gate) setLeader(addr string) { g.lead.Store(&addr) }

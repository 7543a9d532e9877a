package netserver

import (
	"sync"

	"github.com/qmq-go/qmq/pkg/auth"
)

// liveConns is the set of open connections, for the sweep (sweep.go) and
// for closing TLS connections. A connection joins when it is accepted and
// leaves when it is forgotten.
type liveConns struct {
	mu    sync.Mutex
	conns map[*Conn]struct{}
}

func (l *liveConns) add(c *Conn) {
	l.mu.Lock()
	if l.conns == nil {
		l.conns = make(map[*Conn]struct{})
	}
	l.conns[c] = struct{}{}
	l.mu.Unlock()
}

func (l *liveConns) remove(c *Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// each calls f for every open connection, under the set's lock: f must be
// quick and must not close connections itself.
func (l *liveConns) each(f func(c *Conn)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		f(c)
	}
}

// identityConns counts the open connections of each authenticated
// identity, for MaxConnsPerIdentity. A connection is counted under the
// identity it runs as (Conn.identity, guarded by mu).
type identityConns struct {
	mu     sync.Mutex
	counts map[string]int
}

// take counts c under p's identity instead of the one it was counted
// under, and sets c's principal to p; it reports false, changing nothing,
// when p's identity already has limit connections.
func (ic *identityConns) take(c *Conn, p *auth.Principal, limit int) bool {
	key := p.String()
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if c.identity != key {
		if ic.counts[key] >= limit {
			return false
		}
		if ic.counts == nil {
			ic.counts = make(map[string]int)
		}
		ic.counts[key]++
		ic.forgetLocked(c)
		c.identity = key
	}
	c.principal.Store(p)
	c.authVersion.Store(0) // refresh it on the next request (it may predate a policy change)
	return true
}

// release stops counting c under its identity (it closed, or lost it).
func (ic *identityConns) release(c *Conn) {
	ic.mu.Lock()
	ic.forgetLocked(c)
	ic.mu.Unlock()
}

// forgetLocked stops counting c; mu is held.
func (ic *identityConns) forgetLocked(c *Conn) {
	if c.identity == "" {
		return
	}
	if ic.counts[c.identity]--; ic.counts[c.identity] <= 0 {
		delete(ic.counts, c.identity)
	}
	c.identity = ""
}

// count returns how many connections run as the identity p names (tests).
func (ic *identityConns) count(p *auth.Principal) int {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	return ic.counts[p.String()]
}

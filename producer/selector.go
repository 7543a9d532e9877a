package producer

import (
	"math/rand/v2"
	"time"

	"github.com/qmq-go/qmq/pkg/jitter"
	"github.com/qmq-go/qmq/pkg/route"
	"github.com/sony/gobreaker/v2"
)

// selector picks a broker group per message: round-robin over the subject's
// writable groups, skipping groups with an open breaker and groups in their
// avoidance period (after failures or slow answers). The round-robin
// position of a subject lives in its cached route (routeEntry.next), so a
// message costs one map access for both. It is not safe for concurrent use
// (the sender guards it with its mu).
type selector struct {
	health  map[string]*groupHealth
	breaker func(addr string) gobreaker.State
}

type groupHealth struct {
	failures   int       // consecutive failed requests
	avoidUntil time.Time // zero: not avoided
}

// Latency fault tolerance: an answer slower than latencyLevels[i] avoids the
// group for avoidFor[i].
var (
	latencyLevels = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 3 * time.Second}
	avoidFor      = []time.Duration{500 * time.Millisecond, 2 * time.Second, 5 * time.Second, 10 * time.Second}
)

const (
	failureBackoffMin = 100 * time.Millisecond
	failureBackoffMax = 10 * time.Second
)

func newSelector(breaker func(addr string) gobreaker.State) *selector {
	return &selector{health: map[string]*groupHealth{}, breaker: breaker}
}

func (s *selector) healthOf(name string) *groupHealth {
	h := s.health[name]
	if h == nil {
		h = &groupHealth{}
		s.health[name] = h
	}
	return h
}

// newPosition is where a subject's round-robin starts: random, so that many
// producers of one subject do not all start on the same group.
func newPosition() uint32 { return rand.Uint32() }

// pick returns the index in groups of the group for the next message of the
// subject whose round-robin position is pos, preferring groups other than
// avoid (the group that just failed this message); -1 when no group is
// writable.
func (s *selector) pick(pos *uint32, groups []route.Group, avoid string, now time.Time) int {
	n := len(groups)
	if n == 0 {
		return -1
	}
	start := *pos
	*pos++
	fallback, fallbackUntil := -1, time.Time{}
	for i := 0; i < n; i++ {
		idx := int((start + uint32(i)) % uint32(n))
		g := groups[idx]
		if !g.Writable() {
			continue
		}
		h := s.health[g.Name]
		usable := g.Name != avoid && (h == nil || !now.Before(h.avoidUntil)) &&
			(s.breaker == nil || s.breaker(g.Addr) != gobreaker.StateOpen)
		if usable {
			return idx
		}
		// Remember the least bad group in case every group is avoided.
		until := time.Time{}
		if h != nil {
			until = h.avoidUntil
		}
		if until.Before(now) {
			until = now
		}
		if g.Name == avoid {
			until = until.Add(time.Hour) // only when nothing else is left
		}
		if fallback < 0 || until.Before(fallbackUntil) {
			fallback, fallbackUntil = idx, until
		}
	}
	return fallback
}

// succeeded records an answered request and its latency. A group whose
// answer clears it (no failures, fast enough) keeps no record, so the next
// fast answer has nothing to update (tracked).
func (s *selector) succeeded(name string, latency time.Duration, now time.Time) {
	for i := len(latencyLevels) - 1; i >= 0; i-- {
		if latency >= latencyLevels[i] {
			h := s.healthOf(name)
			h.failures = 0
			h.avoidUntil = now.Add(avoidFor[i])
			return
		}
	}
	delete(s.health, name)
}

// tracked reports whether the group has a health record: a success must
// update it, while a fast success of an untracked group changes nothing.
func (s *selector) tracked(name string) bool { return s.health[name] != nil }

// failed records a failed request and returns how long the group is avoided.
func (s *selector) failed(name string, now time.Time) time.Duration {
	h := s.healthOf(name)
	h.failures++
	d := jitter.Nth(failureBackoffMin, failureBackoffMax, h.failures) // 100 ms … 10 s, jittered
	h.avoidUntil = now.Add(d)
	return d
}

// Package route is the seam between the client libraries (producer,
// consumer, the delay server's forwarder) and whatever tells them where a
// subject lives: a static list of broker groups in tests and small setups,
// or the meta server through pkg/metaclient. Clients depend only on the
// Resolver interface here.
package route

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Kind says what a client wants to do with a subject; the meta server
// answers each kind with different groups.
type Kind uint8

const (
	// Produce asks for the writable realtime groups of a subject.
	Produce Kind = 1
	// ProduceDelay asks for writable delay groups.
	ProduceDelay Kind = 2
	// Consume asks for the readable realtime groups of a subject.
	Consume Kind = 3
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case Produce:
		return "produce"
	case ProduceDelay:
		return "produce-delay"
	case Consume:
		return "consume"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// State is a broker group's state as clients see it.
type State uint8

const (
	// ReadWrite groups take sends and serve pulls.
	ReadWrite State = 0
	// Readonly groups serve pulls but take no sends.
	Readonly State = 1
	// Unavailable groups have no live master.
	Unavailable State = 2
)

// String names the state.
func (s State) String() string {
	switch s {
	case ReadWrite:
		return "rw"
	case Readonly:
		return "readonly"
	case Unavailable:
		return "unavailable"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Group is one broker group as a client reaches it: its master's address.
type Group struct {
	Name  string
	Addr  string
	State State
	// Epoch is the group's fencing epoch (0 when unknown); senders put it in
	// requests so a deposed master refuses them.
	Epoch uint64
}

// Writable reports whether the group takes sends.
func (g Group) Writable() bool { return g.State == ReadWrite }

// Readable reports whether the group serves pulls.
func (g Group) Readable() bool { return g.State != Unavailable }

// Request names what is being resolved.
type Request struct {
	Kind    Kind
	Subject string
	// Group is the consumer group (Consume only).
	Group string
	// ClientID identifies the consumer to the meta server (Consume only).
	ClientID string
}

// Resolver finds the broker groups for a request.
type Resolver interface {
	// Resolve returns the groups for req. Implementations cache and may
	// serve a stale answer while their source is unreachable.
	Resolve(ctx context.Context, req Request) ([]Group, error)
	// Invalidate tells the resolver a group of req's answer misbehaved
	// (readonly, not routed, unreachable) so it refreshes soon.
	Invalidate(req Request)
}

// ErrNoGroups means a resolver knows no group for the request.
var ErrNoGroups = errors.New("route: no broker groups")

// Static is a Resolver with fixed groups, for tests and setups without a
// meta server. Its groups can be replaced at run time.
type Static struct {
	mu       sync.RWMutex
	realtime []Group
	delay    []Group
}

// NewStatic returns a resolver answering Produce and Consume with realtime
// and ProduceDelay with delay.
func NewStatic(realtime, delay []Group) *Static {
	return &Static{realtime: append([]Group(nil), realtime...), delay: append([]Group(nil), delay...)}
}

// Set replaces the groups.
func (s *Static) Set(realtime, delay []Group) {
	s.mu.Lock()
	s.realtime = append([]Group(nil), realtime...)
	s.delay = append([]Group(nil), delay...)
	s.mu.Unlock()
}

// Resolve implements Resolver.
func (s *Static) Resolve(_ context.Context, req Request) ([]Group, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var gs []Group
	if req.Kind == ProduceDelay {
		gs = s.delay
	} else {
		gs = s.realtime
	}
	if len(gs) == 0 {
		return nil, fmt.Errorf("%w for %s %q", ErrNoGroups, req.Kind, req.Subject)
	}
	return append([]Group(nil), gs...), nil
}

// Invalidate implements Resolver; static groups never change by themselves.
func (s *Static) Invalidate(Request) {}

// SubjectFree implements SubjectFree: a Static answer depends only on the
// request's kind.
func (s *Static) SubjectFree() bool { return true }

// SubjectFree is implemented by resolvers whose answer depends on the kind
// of a request and not on its subject (Static), so that callers may keep one
// route per kind instead of one per subject.
type SubjectFree interface {
	SubjectFree() bool
}

// IsSubjectFree reports whether r's answers do not depend on the subject.
func IsSubjectFree(r Resolver) bool {
	sf, ok := r.(SubjectFree)
	return ok && sf.SubjectFree()
}

// Groups is a helper building groups named g0, g1, … for addresses, all
// read-write.
func Groups(addrs ...string) []Group {
	out := make([]Group, len(addrs))
	for i, a := range addrs {
		out[i] = Group{Name: fmt.Sprintf("g%d", i), Addr: a}
	}
	return out
}

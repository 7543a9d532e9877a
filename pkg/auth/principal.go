package auth

import "strings"

// Principal is an authenticated identity with its grants compiled: what a
// server checks each request against. It is immutable; a policy change
// makes new Principals for new connections and for connections the server
// re-checks (Authority.Refresh).
type Principal struct {
	// Name is the identity's name ("anonymous" for Open).
	Name string
	// Kind is what the identity is.
	Kind Kind
	// Group is a broker's group.
	Group string
	// Version is the policy version the principal was made from (0: a
	// certificate identity with no entry, or Open).
	Version uint64

	open       bool
	admin      AdminRole
	readBodies bool
	publish    matcher
	consume    matcher
	groups     matcher
}

// Open is the principal of every connection to a server that does not
// require authentication: it may do everything.
var Open = &Principal{Name: "anonymous", Kind: KindAdmin, open: true, admin: AdminWrite, readBodies: true}

func newPrincipal(name string, kind Kind, group string, version uint64, g *Grants) *Principal {
	p := &Principal{Name: name, Kind: kind, Group: group, Version: version}
	switch kind {
	case KindBroker:
		p.publish = matcher{all: true}
	case KindAdmin:
		p.admin = g.Admin
		p.readBodies = g.ReadBodies || g.Admin == AdminWrite
	}
	if kind != KindBroker {
		p.publish = compile(g.Publish)
	}
	p.consume = compile(g.Consume)
	p.groups = compile(g.Groups)
	return p
}

// IsOpen reports whether p is Open (authentication is off).
func (p *Principal) IsOpen() bool { return p.open }

// CanPublish reports whether p may send to subject. The system subjects
// of a (subject, group) follow CanConsume; other subjects starting with %
// are for brokers only.
func (p *Principal) CanPublish(subject string) bool {
	if p.open || p.Kind == KindBroker {
		return true
	}
	if subject != "" && subject[0] == '%' {
		if real, group, ok := SplitSystemSubject(subject); ok {
			return p.CanConsume(real, group)
		}
		return false
	}
	return p.publish.match(subject)
}

// CanConsume reports whether p may pull subject as consumer group. For a
// system subject of a (subject, group) pair the pair's subject and group
// are checked, and the pulling group must be that group.
func (p *Principal) CanConsume(subject, group string) bool {
	if p.open {
		return true
	}
	if subject != "" && subject[0] == '%' {
		real, owner, ok := SplitSystemSubject(subject)
		if !ok || owner != group {
			return false
		}
		subject = real
	}
	return p.consume.match(subject) && p.groups.match(group)
}

// OwnsGroup reports whether p may act as consumer group (any subject).
func (p *Principal) OwnsGroup(group string) bool { return p.open || p.groups.match(group) }

// CanAdminRead reports whether p may read cluster state.
func (p *Principal) CanAdminRead() bool { return p.admin >= AdminRead }

// CanAdminWrite reports whether p may change cluster state.
func (p *Principal) CanAdminWrite() bool { return p.admin >= AdminWrite }

// CanReadBodies reports whether p may read message bodies through admin
// commands (dead letters).
func (p *Principal) CanReadBodies() bool { return p.readBodies }

// IsBrokerOf reports whether p is a broker of group (or Open).
func (p *Principal) IsBrokerOf(group string) bool {
	return p.open || (p.Kind == KindBroker && p.Group == group)
}

// String returns "kind:name" ("broker:rt1", "app:billing").
func (p *Principal) String() string { return p.Kind.String() + ":" + p.Name }

// SplitSystemSubject splits %RETRY%<subject>%<group> and
// %DEAD%<subject>%<group> into subject and group.
func SplitSystemSubject(s string) (subject, group string, ok bool) {
	var rest string
	switch {
	case strings.HasPrefix(s, "%RETRY%"):
		rest = s[len("%RETRY%"):]
	case strings.HasPrefix(s, "%DEAD%"):
		rest = s[len("%DEAD%"):]
	default:
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '%')
	if i <= 0 || i == len(rest)-1 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}

// PublishCheck asks CanPublish for the subjects of one request, remembering
// the answer for the last subject (a batch's messages usually share one),
// so a batch costs one check and no allocation per message.
type PublishCheck struct {
	p    *Principal
	last []byte
	ok   bool
}

// NewPublishCheck returns a check of p's publish rights.
func NewPublishCheck(p *Principal) PublishCheck { return PublishCheck{p: p} }

// Allowed reports whether the principal may publish to subject.
func (c *PublishCheck) Allowed(subject []byte) bool {
	if c.p.open || c.p.Kind == KindBroker {
		return true
	}
	if c.last != nil && string(c.last) == string(subject) {
		return c.ok
	}
	c.last, c.ok = subject, c.p.CanPublish(string(subject))
	return c.ok
}

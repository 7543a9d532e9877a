package auth

import (
	"encoding/json"
	"fmt"
	"time"
)

// Kind is what an identity is.
type Kind uint8

const (
	// KindApp is a producer or consumer application.
	KindApp Kind = 1
	// KindBroker is a realtime or delay broker of one group.
	KindBroker Kind = 2
	// KindAdmin is an operator, or a meta server relaying one.
	KindAdmin Kind = 3
)

var kindNames = map[Kind]string{KindApp: "app", KindBroker: "broker", KindAdmin: "admin"}

// String returns "app", "broker" or "admin".
func (k Kind) String() string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind reads "app", "broker" or "admin".
func ParseKind(s string) (Kind, error) {
	for k, n := range kindNames {
		if n == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("%w: kind %q (app, broker or admin)", ErrInvalid, s)
}

// MarshalText writes the kind's name.
func (k Kind) MarshalText() ([]byte, error) {
	if _, ok := kindNames[k]; !ok {
		return nil, fmt.Errorf("%w: kind %d", ErrInvalid, uint8(k))
	}
	return []byte(k.String()), nil
}

// UnmarshalText reads a kind's name.
func (k *Kind) UnmarshalText(b []byte) error {
	v, err := ParseKind(string(b))
	*k = v
	return err
}

// AdminRole is how much of the cluster an identity administers.
type AdminRole uint8

const (
	// AdminNone administers nothing.
	AdminNone AdminRole = 0
	// AdminRead reads cluster state (not message bodies, unless
	// Grants.ReadBodies).
	AdminRead AdminRole = 1
	// AdminWrite reads and changes cluster state, and reads message bodies.
	AdminWrite AdminRole = 2
)

var roleNames = map[AdminRole]string{AdminNone: "none", AdminRead: "read", AdminWrite: "write"}

// String returns "none", "read" or "write".
func (r AdminRole) String() string {
	if n, ok := roleNames[r]; ok {
		return n
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// ParseAdminRole reads "none", "read" or "write" ("" is none).
func ParseAdminRole(s string) (AdminRole, error) {
	if s == "" {
		return AdminNone, nil
	}
	for r, n := range roleNames {
		if n == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("%w: admin role %q (none, read or write)", ErrInvalid, s)
}

// MarshalText writes the role's name.
func (r AdminRole) MarshalText() ([]byte, error) {
	if _, ok := roleNames[r]; !ok {
		return nil, fmt.Errorf("%w: admin role %d", ErrInvalid, uint8(r))
	}
	return []byte(r.String()), nil
}

// UnmarshalText reads a role's name.
func (r *AdminRole) UnmarshalText(b []byte) error {
	v, err := ParseAdminRole(string(b))
	*r = v
	return err
}

// Grants say what an identity may do beyond what its kind implies.
type Grants struct {
	// Publish: subject patterns the identity may send to.
	Publish []string `json:"publish,omitempty"`
	// Consume: subject patterns the identity may pull from.
	Consume []string `json:"consume,omitempty"`
	// Groups: consumer-group patterns the identity owns, the groups it may
	// consume as (and reset, for its own subjects, never: that is admin).
	Groups []string `json:"groups,omitempty"`
	// Admin: how much of the cluster the identity administers (admins only).
	Admin AdminRole `json:"admin,omitempty"`
	// ReadBodies lets an AdminRead identity read message bodies (dead
	// letters); AdminWrite reads them anyway.
	ReadBodies bool `json:"readBodies,omitempty"`
}

// Validate reports the first pattern that breaks the pattern rules.
func (g *Grants) Validate() error {
	for _, set := range []struct {
		name string
		pats []string
	}{{"publish", g.Publish}, {"consume", g.Consume}, {"groups", g.Groups}} {
		for _, p := range set.pats {
			if err := ValidatePattern(p); err != nil {
				return fmt.Errorf("%s: %w", set.name, err)
			}
		}
	}
	if _, ok := roleNames[g.Admin]; !ok {
		return fmt.Errorf("%w: admin role %d", ErrInvalid, uint8(g.Admin))
	}
	return nil
}

// Entry is one identity as the policy stores it.
type Entry struct {
	// Name identifies the identity: 1–64 characters of [A-Za-z0-9._-].
	Name string `json:"name"`
	// Kind is what the identity is.
	Kind Kind `json:"kind"`
	// Group is a broker's group (KindBroker only).
	Group string `json:"group,omitempty"`
	// Secret is the hashed secret; nil for an identity that proves itself
	// by certificate only.
	Secret *SecretHash `json:"secret,omitempty"`
	// Grants say what the identity may do.
	Grants Grants `json:"grants"`
	// Disabled refuses the identity (secret and certificate alike).
	Disabled bool `json:"disabled,omitempty"`
	// Created is when the identity was made, Updated when it last changed
	// (for people).
	Created time.Time `json:"created,omitzero"`
	Updated time.Time `json:"updated,omitzero"`
}

// Validate reports the first field that breaks a rule.
func (e *Entry) Validate() error {
	if err := ValidateName(e.Name); err != nil {
		return err
	}
	if _, ok := kindNames[e.Kind]; !ok {
		return fmt.Errorf("%w: identity %s: kind %d", ErrInvalid, e.Name, uint8(e.Kind))
	}
	if e.Kind == KindBroker {
		if err := ValidateName(e.Group); err != nil {
			return fmt.Errorf("identity %s: broker group: %w", e.Name, err)
		}
	} else if e.Group != "" {
		return fmt.Errorf("%w: identity %s: only a broker has a group", ErrInvalid, e.Name)
	}
	if e.Grants.Admin != AdminNone && e.Kind != KindAdmin {
		return fmt.Errorf("%w: identity %s: only an admin has an admin role", ErrInvalid, e.Name)
	}
	if e.Secret != nil {
		if err := e.Secret.validate(); err != nil {
			return fmt.Errorf("identity %s: %w", e.Name, err)
		}
	}
	if err := e.Grants.Validate(); err != nil {
		return fmt.Errorf("identity %s: %w", e.Name, err)
	}
	return nil
}

// Public returns the entry without its secret hash, for listings.
func (e Entry) Public() Entry {
	e.Secret = nil
	return e
}

// MarshalEntry and UnmarshalEntry are the JSON form the meta server keeps in
// etcd.
func MarshalEntry(e *Entry) ([]byte, error) { return json.Marshal(e) }

// UnmarshalEntry decodes and validates an entry.
func UnmarshalEntry(b []byte) (*Entry, error) {
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("%w: identity: %v", ErrInvalid, err)
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return &e, nil
}

// ValidateName reports whether s is a valid identity or group name: 1–64
// characters of [A-Za-z0-9._-].
func ValidateName(s string) error {
	if s == "" || len(s) > 64 {
		return fmt.Errorf("%w: name %q: 1 to 64 characters", ErrInvalid, s)
	}
	for i := 0; i < len(s); i++ {
		if !nameChar(s[i]) {
			return fmt.Errorf("%w: name %q: character %q (use A-Z a-z 0-9 . _ -)", ErrInvalid, s, s[i])
		}
	}
	return nil
}

func nameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

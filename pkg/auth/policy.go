package auth

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
)

// Policy is an immutable snapshot of every identity, at a version (the
// etcd revision the meta server read it at; larger is newer).
type Policy struct {
	version uint64
	entries map[string]*Entry
}

// NewPolicy builds a policy from entries, validating each; names must be
// unique.
func NewPolicy(version uint64, entries []Entry) (*Policy, error) {
	p := &Policy{version: version, entries: make(map[string]*Entry, len(entries))}
	for i := range entries {
		e := entries[i]
		if err := e.Validate(); err != nil {
			return nil, err
		}
		if _, dup := p.entries[e.Name]; dup {
			return nil, fmt.Errorf("%w: identity %s twice", ErrInvalid, e.Name)
		}
		p.entries[e.Name] = &e
	}
	return p, nil
}

// Version is the policy's version.
func (p *Policy) Version() uint64 { return p.version }

// Len is the number of identities.
func (p *Policy) Len() int { return len(p.entries) }

// Entry returns the identity of that name.
func (p *Policy) Entry(name string) (Entry, bool) {
	e, ok := p.entries[name]
	if !ok {
		return Entry{}, false
	}
	return *e, true
}

// Entries returns every identity, sorted by name.
func (p *Policy) Entries() []Entry {
	out := make([]Entry, 0, len(p.entries))
	for _, e := range p.entries {
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Authenticate checks a secret against the identity's (the full hash
// time: servers go through an Authority, which caches).
func (p *Policy) Authenticate(name, secret string) (*Principal, error) {
	e, ok := p.entries[name]
	switch {
	case !ok:
		return nil, ErrUnknownIdentity
	case e.Disabled:
		return nil, ErrDisabled
	case e.Secret == nil:
		return nil, ErrNoSecret
	case !e.Secret.Verify(secret):
		return nil, ErrBadSecret
	}
	return p.principal(e), nil
}

func (p *Policy) principal(e *Entry) *Principal {
	return newPrincipal(e.Name, e.Kind, e.Group, p.version, &e.Grants)
}

// Certificate returns the identity a verified client certificate names
// (a URI SAN qmq://<kind>/<name>; see the package documentation). The
// caller has verified the chain (crypto/tls did, against the server's
// client CA). A nil policy grants a certificate its kind's rights only.
func (p *Policy) Certificate(cert *x509.Certificate) (*Principal, error) {
	kind, name, err := CertificateIdentity(cert)
	if err != nil {
		return nil, err
	}
	var e *Entry
	if p != nil {
		e = p.entries[name]
	}
	if e != nil && e.Kind == kind {
		if e.Disabled {
			return nil, ErrDisabled
		}
		return p.principal(e), nil
	}
	switch kind {
	case KindBroker:
		return newPrincipal(name, KindBroker, name, 0, &Grants{}), nil
	case KindAdmin:
		return newPrincipal(name, KindAdmin, "", 0, &Grants{Admin: AdminWrite}), nil
	}
	return newPrincipal(name, KindApp, "", 0, &Grants{}), nil
}

// CertificateIdentity reads the qmq://<kind>/<name> URI SAN of a
// certificate.
func CertificateIdentity(cert *x509.Certificate) (Kind, string, error) {
	for _, u := range cert.URIs {
		if u.Scheme != "qmq" {
			continue
		}
		kind, err := ParseKind(u.Host)
		if err != nil {
			return 0, "", fmt.Errorf("%w: %s: %v", ErrBadCertificate, u, err)
		}
		name := u.Path
		if len(name) > 0 && name[0] == '/' {
			name = name[1:]
		}
		if err := ValidateName(name); err != nil {
			return 0, "", fmt.Errorf("%w: %s: %v", ErrBadCertificate, u, err)
		}
		return kind, name, nil
	}
	return 0, "", ErrBadCertificate
}

// IdentityURI returns the URI SAN a certificate for (kind, name) carries.
func IdentityURI(kind Kind, name string) *url.URL {
	return &url.URL{Scheme: "qmq", Host: kind.String(), Path: "/" + name}
}

// policyJSON is the encoded form of a Policy: what the meta server hands
// to brokers and what they keep on disk.
type policyJSON struct {
	Version    uint64  `json:"version"`
	Identities []Entry `json:"identities"`
}

// MarshalJSON encodes the policy, secret hashes included: keep the bytes
// where only the server can read them.
func (p *Policy) MarshalJSON() ([]byte, error) {
	return json.Marshal(policyJSON{Version: p.version, Identities: p.Entries()})
}

// ParsePolicy decodes and validates an encoded policy.
func ParsePolicy(b []byte) (*Policy, error) {
	var j policyJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("%w: policy: %v", ErrInvalid, err)
	}
	return NewPolicy(j.Version, j.Identities)
}

package auth

import (
	"crypto/sha256"
	"crypto/x509"
	"sync"
	"sync/atomic"
)

// Authority is a server's view of the policy: the newest Policy it has,
// and the secrets it verified under it. Safe for concurrent use.
type Authority struct {
	policy atomic.Pointer[Policy]

	mu       sync.Mutex
	verified map[string]verifiedSecret // name → the secret verified last
	slow     chan struct{}             // one slow verification at a time

	slowHashes atomic.Int64 // slow verifications run (tests)
}

// verifiedSecret is a secret that passed the slow hash: the SHA-256 of the
// secret, and the stored hash it was checked against (a new secret for the
// identity gets a new salt and hash, so the entry stops matching; a policy
// change that leaves the secret alone keeps it).
type verifiedSecret struct {
	stored *SecretHash
	sum    [sha256.Size]byte
}

// maxVerified bounds the verification cache; past it the cache starts over.
const maxVerified = 100_000

// NewAuthority returns an Authority holding p (nil: no identities yet).
func NewAuthority(p *Policy) *Authority {
	a := &Authority{verified: make(map[string]verifiedSecret), slow: make(chan struct{}, 1)}
	if p != nil {
		a.policy.Store(p)
	}
	return a
}

// Policy returns the current policy (nil before the first).
func (a *Authority) Policy() *Policy { return a.policy.Load() }

// Version returns the current policy's version (0 before the first).
func (a *Authority) Version() uint64 {
	if p := a.policy.Load(); p != nil {
		return p.version
	}
	return 0
}

// Update installs p if it is newer than the current policy and reports
// whether it did.
func (a *Authority) Update(p *Policy) bool {
	for {
		cur := a.policy.Load()
		if cur != nil && p.version <= cur.version {
			return false
		}
		if a.policy.CompareAndSwap(cur, p) {
			return true
		}
	}
}

// Replace installs p whatever its version: for a broker that found every
// meta server on an older version for long (an etcd rebuilt from scratch
// starts its revisions again), never for a routine update.
func (a *Authority) Replace(p *Policy) { a.policy.Store(p) }

// Authenticate checks credentials against the current policy. A secret
// verified before against the same stored hash (the identity's secret has
// not changed since, whatever else the policy changed) costs a SHA-256, so
// a storm of reconnecting clients does not pay the slow hash again; a new
// one costs the slow hash, and slow hashes run one at a time, so a client
// guessing secrets can hold at most one CPU.
func (a *Authority) Authenticate(name, secret string) (*Principal, error) {
	p := a.policy.Load()
	if p == nil {
		return nil, ErrUnknownIdentity
	}
	e, ok := p.entries[name]
	switch {
	case !ok:
		return nil, ErrUnknownIdentity
	case e.Disabled:
		return nil, ErrDisabled
	case e.Secret == nil:
		return nil, ErrNoSecret
	}
	sum := sha256.Sum256([]byte(secret))
	a.mu.Lock()
	v, hit := a.verified[name]
	a.mu.Unlock()
	if hit && v.sum == sum && v.stored.Equal(e.Secret) {
		return p.principal(e), nil
	}
	a.slow <- struct{}{}
	a.slowHashes.Add(1)
	ok = e.Secret.Verify(secret)
	<-a.slow
	if !ok {
		return nil, ErrBadSecret
	}
	a.mu.Lock()
	if len(a.verified) >= maxVerified {
		clear(a.verified)
	}
	a.verified[name] = verifiedSecret{stored: e.Secret, sum: sum}
	a.mu.Unlock()
	return p.principal(e), nil
}

// Certificate returns the principal a verified client certificate names,
// under the current policy.
func (a *Authority) Certificate(cert *x509.Certificate) (*Principal, error) {
	return a.policy.Load().Certificate(cert)
}

// Refresh returns the principal old would be under the current policy: the
// same one when the policy has not changed, a new one with the identity's
// current grants, or an error when it was removed or disabled. A
// certificate principal with no entry (Version 0) stays as it is.
func (a *Authority) Refresh(old *Principal) (*Principal, error) {
	p := a.policy.Load()
	if old.open || p == nil || old.Version == p.version {
		return old, nil
	}
	e, ok := p.entries[old.Name]
	switch {
	case !ok && old.Version == 0:
		return old, nil
	case !ok:
		return nil, ErrUnknownIdentity
	case e.Disabled:
		return nil, ErrDisabled
	case e.Kind != old.Kind:
		return nil, ErrUnknownIdentity
	}
	return p.principal(e), nil
}

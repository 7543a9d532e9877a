package auth

import "errors"

// Errors. A server answers ErrUnknownIdentity, ErrBadSecret, ErrDisabled
// and ErrBadCertificate alike (protocol.StatusUnauthenticated), so a client
// cannot tell which names exist.
var (
	// ErrUnknownIdentity: no identity of that name.
	ErrUnknownIdentity = errors.New("auth: unknown identity")
	// ErrBadSecret: the secret does not match the identity's.
	ErrBadSecret = errors.New("auth: wrong secret")
	// ErrDisabled: the identity exists but is disabled.
	ErrDisabled = errors.New("auth: identity disabled")
	// ErrNoSecret: the identity has no secret (certificate only).
	ErrNoSecret = errors.New("auth: identity has no secret")
	// ErrBadCertificate: the certificate names no identity (no qmq:// URI
	// SAN) or a malformed one.
	ErrBadCertificate = errors.New("auth: certificate names no identity")
	// ErrInvalid: a name, pattern, kind, role or credential breaks a rule.
	ErrInvalid = errors.New("auth: invalid")
)

package api

import "time"

// Identity is one identity as the admin API shows it: never its secret,
// only whether it has one.
type Identity struct {
	Name string `json:"name"`
	// Kind is "app" (a producer or consumer), "broker" (of Group) or
	// "admin".
	Kind  string `json:"kind"`
	Group string `json:"group,omitempty"`
	// HasSecret is false for an identity that proves itself by TLS
	// client certificate only.
	HasSecret bool      `json:"hasSecret"`
	Disabled  bool      `json:"disabled,omitempty"`
	Grants    Grants    `json:"grants"`
	Created   time.Time `json:"created,omitzero"`
	Updated   time.Time `json:"updated,omitzero"`
	// Version is the etcd mod revision of the identity.
	Version int64 `json:"version"`
}

// Grants are what an identity may do beyond what its kind implies.
// Patterns are exact names, "*", or a prefix ending in "*" ("order.*").
type Grants struct {
	Publish []string `json:"publish,omitempty"` // subjects it may send to
	Consume []string `json:"consume,omitempty"` // subjects it may pull
	Groups  []string `json:"groups,omitempty"`  // consumer groups it owns (consumes as)
	// Admin is "none", "read" or "write" (admins only; "" is none).
	Admin string `json:"admin,omitempty"`
	// ReadBodies lets a read admin see message bodies (dead letters);
	// write admins see them anyway.
	ReadBodies bool `json:"readBodies,omitempty"`
}

// IdentityRequest creates an identity. Secret empty: the server generates
// one (and answers it once); NoSecret makes an identity that proves
// itself by certificate only. Group defaults to Name for a broker.
type IdentityRequest struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Group    string `json:"group,omitempty"`
	Secret   string `json:"secret,omitempty"`
	NoSecret bool   `json:"noSecret,omitempty"`
	Grants   Grants `json:"grants"`
	Disabled bool   `json:"disabled,omitempty"`
}

// SecretRequest rotates an identity's secret: Secret empty, the server
// generates one.
type SecretRequest struct {
	Secret string `json:"secret,omitempty"`
}

// IdentitySecret answers a create or a rotate: the identity and its new
// secret, shown this once (the server keeps only its hash). Secret is
// empty when the request chose it. Credentials is "name:secret", what a
// client puts in a credentials file.
type IdentitySecret struct {
	Identity    Identity `json:"identity"`
	Secret      string   `json:"secret,omitempty"`
	Credentials string   `json:"credentials,omitempty"`
}

// Revoke names grants to take away: patterns to remove, Admin to drop the
// admin role, ReadBodies to drop the body right.
type Revoke struct {
	Publish    []string `json:"publish,omitempty"`
	Consume    []string `json:"consume,omitempty"`
	Groups     []string `json:"groups,omitempty"`
	Admin      bool     `json:"admin,omitempty"`
	ReadBodies bool     `json:"readBodies,omitempty"`
}

// Whoami is who the request's credential is and what it may do here.
type Whoami struct {
	Authenticated bool   `json:"authenticated"`
	Name          string `json:"name,omitempty"`
	Kind          string `json:"kind,omitempty"`
	Group         string `json:"group,omitempty"`
	Admin         string `json:"admin"` // "none", "read" or "write"
	// AuthRequired: the meta server runs with --auth (reads need admin
	// read).
	AuthRequired      bool `json:"authRequired"`
	CanRead           bool `json:"canRead"`
	CanReadIdentities bool `json:"canReadIdentities"`
	CanReadBodies     bool `json:"canReadBodies"`
	CanWrite          bool `json:"canWrite"`
}

package api

import (
	"context"
	"net/http"
)

// Whoami returns who the client's credential is and what it may do.
func (c *Client) Whoami(ctx context.Context) (Whoami, error) {
	var w Whoami
	return w, c.Do(ctx, http.MethodGet, "/whoami", nil, &w)
}

// Identities lists every identity (never a secret).
func (c *Client) Identities(ctx context.Context) ([]Identity, error) {
	var ids []Identity
	return ids, c.Do(ctx, http.MethodGet, "/identities", nil, &ids)
}

// Identity returns one identity.
func (c *Client) Identity(ctx context.Context, name string) (Identity, error) {
	var id Identity
	return id, c.Do(ctx, http.MethodGet, "/identities/"+esc(name), nil, &id)
}

// CreateIdentity creates an identity; the answer carries the generated
// secret, the only time it is shown.
func (c *Client) CreateIdentity(ctx context.Context, req IdentityRequest) (IdentitySecret, error) {
	var out IdentitySecret
	return out, c.Do(ctx, http.MethodPost, "/identities", req, &out)
}

// DeleteIdentity removes an identity and returns it.
func (c *Client) DeleteIdentity(ctx context.Context, name string) (Identity, error) {
	var id Identity
	return id, c.Do(ctx, http.MethodDelete, "/identities/"+esc(name), nil, &id)
}

// SetIdentityEnabled enables or disables an identity.
func (c *Client) SetIdentityEnabled(ctx context.Context, name string, enabled bool) (Identity, error) {
	var id Identity
	op := "/disable"
	if enabled {
		op = "/enable"
	}
	return id, c.Do(ctx, http.MethodPost, "/identities/"+esc(name)+op, nil, &id)
}

// RotateSecret gives an identity a new secret: secret, or a generated one
// (answered once) when secret is empty.
func (c *Client) RotateSecret(ctx context.Context, name, secret string) (IdentitySecret, error) {
	var out IdentitySecret
	return out, c.Do(ctx, http.MethodPost, "/identities/"+esc(name)+"/rotate", SecretRequest{Secret: secret}, &out)
}

// SetGrants replaces an identity's grants.
func (c *Client) SetGrants(ctx context.Context, name string, g Grants) (Identity, error) {
	var id Identity
	return id, c.Do(ctx, http.MethodPut, "/identities/"+esc(name)+"/grants", g, &id)
}

// Grant adds grants to an identity's (a named admin role replaces its
// role).
func (c *Client) Grant(ctx context.Context, name string, g Grants) (Identity, error) {
	var id Identity
	return id, c.Do(ctx, http.MethodPost, "/identities/"+esc(name)+"/grant", g, &id)
}

// Revoke takes grants away from an identity.
func (c *Client) Revoke(ctx context.Context, name string, r Revoke) (Identity, error) {
	var id Identity
	return id, c.Do(ctx, http.MethodPost, "/identities/"+esc(name)+"/revoke", r, &id)
}

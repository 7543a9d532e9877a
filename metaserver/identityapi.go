package metaserver

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/auth"
)

// identityRoutes serves the identity endpoints of the admin API (package
// api documents them): reads need admin read, changes admin write. No
// answer ever carries a secret hash; a secret the server generates is
// answered once, by the request that made it.
func (s *Server) identityRoutes(mux *http.ServeMux, p string) {
	mux.HandleFunc("GET "+p+"/identities", s.respond(accessAdminRead, s.listIdentities))
	mux.HandleFunc("GET "+p+"/identities/{name}", s.respond(accessAdminRead, s.getIdentityHTTP))
	mux.HandleFunc("POST "+p+"/identities", s.change(s.postIdentity))
	mux.HandleFunc("DELETE "+p+"/identities/{name}", s.change(s.deleteIdentityHTTP))
	mux.HandleFunc("POST "+p+"/identities/{name}/enable", s.change(s.setDisabled(false)))
	mux.HandleFunc("POST "+p+"/identities/{name}/disable", s.change(s.setDisabled(true)))
	mux.HandleFunc("POST "+p+"/identities/{name}/rotate", s.change(s.rotateSecret))
	mux.HandleFunc("PUT "+p+"/identities/{name}/grants", s.change(s.grantsChange(setGrants)))
	mux.HandleFunc("POST "+p+"/identities/{name}/grant", s.change(s.grantsChange(addGrants)))
	mux.HandleFunc("POST "+p+"/identities/{name}/revoke", s.change(s.postRevoke))
}

// apiIdentity is an entry as the API shows it: no secret hash.
func apiIdentity(e auth.Entry, modRev int64) api.Identity {
	return api.Identity{
		Name: e.Name, Kind: e.Kind.String(), Group: e.Group, HasSecret: e.Secret != nil, Disabled: e.Disabled,
		Grants: apiGrants(e.Grants), Created: e.Created, Updated: e.Updated, Version: modRev,
	}
}

func apiGrants(g auth.Grants) api.Grants {
	return api.Grants{Publish: g.Publish, Consume: g.Consume, Groups: g.Groups, Admin: g.Admin.String(), ReadBodies: g.ReadBodies}
}

// authGrants parses API grants (an unknown admin role is bad input).
func authGrants(g api.Grants) (auth.Grants, error) {
	role, err := auth.ParseAdminRole(g.Admin)
	if err != nil {
		return auth.Grants{}, badIdentity(err)
	}
	out := auth.Grants{Publish: g.Publish, Consume: g.Consume, Groups: g.Groups, Admin: role, ReadBodies: g.ReadBodies}
	if err := out.Validate(); err != nil {
		return auth.Grants{}, badIdentity(err)
	}
	return out, nil
}

func (s *Server) listIdentities(*http.Request) (any, error) {
	es, revs := s.view.identityList()
	out := make([]api.Identity, len(es))
	for i, e := range es {
		out[i] = apiIdentity(e, revs[i])
	}
	return out, nil
}

// identityAfter answers name as the view has it once it reached rev.
func (s *Server) identityAfter(r *http.Request, name string, rev int64) (api.Identity, error) {
	if err := s.waitView(r.Context(), rev); err != nil {
		return api.Identity{}, err
	}
	e, modRev, ok := s.view.identity(name)
	if !ok {
		return api.Identity{}, identityNotFound(name)
	}
	return apiIdentity(e, modRev), nil
}

func (s *Server) getIdentityHTTP(r *http.Request) (any, error) {
	name := r.PathValue("name")
	e, modRev, ok := s.view.identity(name)
	if !ok {
		return nil, identityNotFound(name)
	}
	return apiIdentity(e, modRev), nil
}

// newSecret returns the secret a create or rotate stores: the request's
// (checked), or a generated one; shown tells whether to answer it.
func newSecret(requested string) (secret string, hash *auth.SecretHash, shown bool, err error) {
	shown = requested == ""
	secret = requested
	if shown {
		if secret, err = auth.GenerateSecret(); err != nil {
			return "", nil, false, err
		}
	}
	hash, err = auth.HashSecret(secret)
	if err != nil {
		return "", nil, false, badIdentity(err)
	}
	return secret, hash, shown, nil
}

func (s *Server) postIdentity(r *http.Request) (any, error) {
	var in api.IdentityRequest
	if err := decodeBody(r, &in); err != nil {
		return nil, err
	}
	kind, err := auth.ParseKind(in.Kind)
	if err != nil {
		return nil, badIdentity(err)
	}
	grants, err := authGrants(in.Grants)
	if err != nil {
		return nil, err
	}
	if kind == auth.KindBroker && in.Group == "" {
		in.Group = in.Name
	}
	now := time.Now().UTC()
	e := auth.Entry{Name: in.Name, Kind: kind, Group: in.Group, Grants: grants, Disabled: in.Disabled, Created: now, Updated: now}
	var secret string
	shown := false
	switch {
	case in.NoSecret && in.Secret != "":
		return nil, fmt.Errorf("%w: secret and noSecret exclude each other", errBadInput)
	case !in.NoSecret:
		if secret, e.Secret, shown, err = newSecret(in.Secret); err != nil {
			return nil, err
		}
	}
	rev, err := s.createIdentity(r.Context(), e)
	if err != nil {
		return nil, err
	}
	id, err := s.identityAfter(r, e.Name, rev)
	if err != nil {
		return nil, err
	}
	return secretAnswer(id, secret, shown), nil
}

// secretAnswer is the answer to a create or rotate: the generated secret
// once, never one the request chose.
func secretAnswer(id api.Identity, secret string, shown bool) api.IdentitySecret {
	out := api.IdentitySecret{Identity: id}
	if shown {
		out.Secret = secret
		out.Credentials = auth.Credentials{Name: id.Name, Secret: secret}.String()
	}
	return out
}

func (s *Server) deleteIdentityHTTP(r *http.Request) (any, error) {
	e, rev, err := s.deleteIdentity(r.Context(), r.PathValue("name"))
	if err != nil {
		return nil, err
	}
	if err := s.waitView(r.Context(), rev); err != nil {
		return nil, err
	}
	return apiIdentity(e, rev), nil
}

func (s *Server) setDisabled(disabled bool) func(r *http.Request) (any, error) {
	return s.identityChange(func(e *auth.Entry, _ *http.Request) error {
		e.Disabled = disabled
		return nil
	})
}

// identityChange wraps a read-modify-write of the identity the path names.
func (s *Server) identityChange(change func(e *auth.Entry, r *http.Request) error) func(r *http.Request) (any, error) {
	return func(r *http.Request) (any, error) {
		name := r.PathValue("name")
		_, rev, err := s.updateIdentity(r.Context(), name, func(e *auth.Entry) error { return change(e, r) })
		if err != nil {
			return nil, err
		}
		return s.identityAfter(r, name, rev)
	}
}

func (s *Server) rotateSecret(r *http.Request) (any, error) {
	var in api.SecretRequest
	if err := decodeBody(r, &in); err != nil {
		return nil, err
	}
	secret, hash, shown, err := newSecret(in.Secret)
	if err != nil {
		return nil, err
	}
	name := r.PathValue("name")
	_, rev, err := s.updateIdentity(r.Context(), name, func(e *auth.Entry) error {
		e.Secret = hash
		return nil
	})
	if err != nil {
		return nil, err
	}
	id, err := s.identityAfter(r, name, rev)
	if err != nil {
		return nil, err
	}
	return secretAnswer(id, secret, shown), nil
}

// grantsChange wraps a change of an identity's grants by the API grants
// in the request body: apply changes cur with g (in as parsed) and the
// request's own fields.
func (s *Server) grantsChange(apply func(cur *auth.Grants, g auth.Grants, in api.Grants)) func(r *http.Request) (any, error) {
	return func(r *http.Request) (any, error) {
		var in api.Grants
		if err := decodeBody(r, &in); err != nil {
			return nil, err
		}
		g, err := authGrants(in)
		if err != nil {
			return nil, err
		}
		return s.identityChange(func(e *auth.Entry, _ *http.Request) error {
			apply(&e.Grants, g, in)
			return nil
		})(r)
	}
}

// setGrants replaces an identity's grants.
func setGrants(cur *auth.Grants, g auth.Grants, _ api.Grants) { *cur = g }

// addGrants adds patterns to an identity's grants; a named admin role
// replaces its role, and readBodies sets the body right.
func addGrants(cur *auth.Grants, g auth.Grants, in api.Grants) {
	cur.Publish = union(cur.Publish, g.Publish)
	cur.Consume = union(cur.Consume, g.Consume)
	cur.Groups = union(cur.Groups, g.Groups)
	if in.Admin != "" {
		cur.Admin = g.Admin
	}
	cur.ReadBodies = cur.ReadBodies || g.ReadBodies
}

// postRevoke removes patterns from an identity's grants, and its admin
// role or body right when the request says so.
func (s *Server) postRevoke(r *http.Request) (any, error) {
	var in api.Revoke
	if err := decodeBody(r, &in); err != nil {
		return nil, err
	}
	return s.identityChange(func(e *auth.Entry, _ *http.Request) error {
		e.Grants.Publish = without(e.Grants.Publish, in.Publish)
		e.Grants.Consume = without(e.Grants.Consume, in.Consume)
		e.Grants.Groups = without(e.Grants.Groups, in.Groups)
		if in.Admin {
			e.Grants.Admin = auth.AdminNone
		}
		if in.ReadBodies {
			e.Grants.ReadBodies = false
		}
		return nil
	})(r)
}

// union returns a with b's patterns it lacks appended.
func union(a, b []string) []string {
	for _, p := range b {
		if !slices.Contains(a, p) {
			a = append(a, p)
		}
	}
	return a
}

// without returns a without b's patterns.
func without(a, b []string) []string {
	return slices.DeleteFunc(slices.Clone(a), func(p string) bool { return slices.Contains(b, p) })
}

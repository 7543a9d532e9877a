package metaserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/protocol"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Identities live under identities/<name>, one auth.Entry (JSON, the
// secret hashed) per key. The view keeps them and publishes an auth.Policy
// made of all of them whenever one changes; the policy's version is the
// etcd revision of the last identity change it holds (or of the read that
// loaded the view, when a reload found them changed), so a policy of
// version V holds the identities as they stood at revision V on any meta
// server, and a broker that has V needs only a policy of a larger version.
const dirIdentities = "identities/"

func (k keys) identity(name string) string { return k.prefix + dirIdentities + name }

// AdminIdentity is the identity the admin token authenticates as: the meta
// server makes sure it exists, with AdminWrite and that token as its
// secret, every time it starts, and a bare bearer token names it.
const AdminIdentity = auth.DefaultAdminName

// Errors of identity changes.
var (
	// errConflict: the change breaks a rule (HTTP 409).
	errConflict = errors.New("conflict")
	// errIdentityExists: an identity of that name exists already.
	errIdentityExists = fmt.Errorf("%w: identity exists", errConflict)
	// errLastAdmin: the change would leave no enabled admin with write
	// access.
	errLastAdmin = fmt.Errorf("%w: the last enabled admin with write access", errConflict)
)

// identities is the view's share of identity keys (guarded by view.mu, as
// the rest of the view) and the policy published from them (guarded by
// pmu). The server's Authority is updated with every new policy.
type identities struct {
	lg        *zap.Logger
	authority *auth.Authority

	entries map[string]identityEntry // view.mu
	dirty   bool                     // view.mu: changed since the last publish
	lastRev int64                    // view.mu: mod revision of the latest change since then

	pmu     sync.Mutex
	content []byte        // JSON of the published entries (what a reload compares)
	encoded []byte        // the published policy's JSON, as CmdPolicy sends it
	changed chan struct{} // closed and replaced when a new policy is published
}

type identityEntry struct {
	e      auth.Entry
	modRev int64
}

func (ids *identities) init(lg *zap.Logger) {
	ids.lg = lg
	ids.authority = auth.NewAuthority(nil)
	ids.entries = map[string]identityEntry{}
	ids.changed = make(chan struct{})
}

func (ids *identities) clearLocked() {
	ids.entries = map[string]identityEntry{}
	ids.dirty = true
}

// applyLocked applies one identities/<name> key.
func (ids *identities) applyLocked(e kv, name string) {
	ids.dirty = true
	ids.lastRev = max(ids.lastRev, e.modRev)
	if e.value == nil {
		delete(ids.entries, name)
		return
	}
	entry, err := auth.UnmarshalEntry(e.value)
	if err == nil && entry.Name != name {
		err = fmt.Errorf("the entry names %q", entry.Name)
	}
	if err != nil {
		ids.lg.Warn("ignoring an identity that does not decode", zap.String("key", e.key), zap.Error(err))
		delete(ids.entries, name)
		return
	}
	ids.entries[name] = identityEntry{e: *entry, modRev: e.modRev}
}

// publishLocked publishes a policy after identity keys changed: at
// lastRev after watched changes, at the read's revision after a reload
// (unless the reload found the same identities, which keep their version).
func (ids *identities) publishLocked(readRev int64) {
	if !ids.dirty {
		return
	}
	ids.dirty = false
	list := make([]auth.Entry, 0, len(ids.entries))
	for _, ie := range ids.entries {
		list = append(list, ie.e)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	content, err := json.Marshal(list)
	if err != nil {
		ids.lg.Error("cannot encode the identities", zap.Error(err))
		return
	}
	ids.pmu.Lock()
	defer ids.pmu.Unlock()
	if bytes.Equal(content, ids.content) {
		return
	}
	version := ids.lastRev
	if readRev != 0 {
		version = readRev
	}
	if cur := int64(ids.authority.Version()); version <= cur {
		version = cur + 1 // never happens with etcd revisions; keeps versions growing whatever
	}
	p, err := auth.NewPolicy(uint64(version), list)
	if err != nil {
		ids.lg.Error("cannot build the policy", zap.Error(err))
		return
	}
	encoded, err := json.Marshal(p)
	if err != nil {
		ids.lg.Error("cannot encode the policy", zap.Error(err))
		return
	}
	ids.content, ids.encoded = content, encoded
	ids.authority.Update(p)
	close(ids.changed)
	ids.changed = make(chan struct{})
	ids.lg.Info("policy published", zap.Uint64("version", p.Version()), zap.Int("identities", p.Len()))
}

// published returns the current policy's version, its encoding and a
// channel closed when a newer one is published.
func (ids *identities) published() (uint64, []byte, <-chan struct{}) {
	ids.pmu.Lock()
	defer ids.pmu.Unlock()
	return ids.authority.Version(), ids.encoded, ids.changed
}

// identity returns one identity from the view with its mod revision.
func (v *view) identity(name string) (auth.Entry, int64, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	ie, ok := v.ids.entries[name]
	return ie.e, ie.modRev, ok
}

// identityList returns every identity from the view, sorted by name, with
// their mod revisions.
func (v *view) identityList() ([]auth.Entry, []int64) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	names := make([]string, 0, len(v.ids.entries))
	for n := range v.ids.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	out, revs := make([]auth.Entry, len(names)), make([]int64, len(names))
	for i, n := range names {
		out[i], revs[i] = v.ids.entries[n].e, v.ids.entries[n].modRev
	}
	return out, revs
}

// otherWriters counts the enabled AdminWrite identities other than name.
func (v *view) otherWriters(name string) int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	n := 0
	for other, ie := range v.ids.entries {
		if other != name && isWriter(&ie.e) {
			n++
		}
	}
	return n
}

func isWriter(e *auth.Entry) bool {
	return e.Kind == auth.KindAdmin && e.Grants.Admin == auth.AdminWrite && !e.Disabled
}

// --- etcd ---

// createIdentity writes e unless an identity of its name exists, and
// returns the revision of the write.
func (s *Server) createIdentity(ctx context.Context, e auth.Entry) (int64, error) {
	if err := e.Validate(); err != nil {
		return 0, badIdentity(err)
	}
	b, err := auth.MarshalEntry(&e)
	if err != nil {
		return 0, err
	}
	key := s.keys.identity(e.Name)
	ctx, cancel := s.store.ctx(ctx)
	defer cancel()
	resp, err := s.etcd.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return 0, etcdErr("identity txn", err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("%w: %s", errIdentityExists, e.Name)
	}
	return resp.Header.Revision, nil
}

// getIdentity reads an identity from etcd (not the view) with its mod
// revision; ok false when it does not exist.
func (s *Server) getIdentity(ctx context.Context, name string) (auth.Entry, int64, bool, error) {
	ctx, cancel := s.store.ctx(ctx)
	defer cancel()
	resp, err := s.etcd.Get(ctx, s.keys.identity(name))
	if err != nil {
		return auth.Entry{}, 0, false, etcdErr("get identity", err)
	}
	if len(resp.Kvs) == 0 {
		return auth.Entry{}, 0, false, nil
	}
	e, err := auth.UnmarshalEntry(resp.Kvs[0].Value)
	if err != nil {
		return auth.Entry{}, 0, false, fmt.Errorf("identity %s in etcd: %w", name, err)
	}
	return *e, resp.Kvs[0].ModRevision, true, nil
}

// casIdentity writes e if its key is still at modRev, and reports whether
// it wrote and the revision of the write.
func (s *Server) casIdentity(ctx context.Context, e *auth.Entry, modRev int64) (bool, int64, error) {
	b, err := auth.MarshalEntry(e)
	if err != nil {
		return false, 0, err
	}
	key := s.keys.identity(e.Name)
	cmp := clientv3.Compare(clientv3.ModRevision(key), "=", modRev)
	if modRev == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	}
	ctx, cancel := s.store.ctx(ctx)
	defer cancel()
	resp, err := s.etcd.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return false, 0, etcdErr("identity txn", err)
	}
	return resp.Succeeded, resp.Header.Revision, nil
}

// existingIdentity reads an identity from etcd; a missing one is an error
// (404).
func (s *Server) existingIdentity(ctx context.Context, name string) (auth.Entry, int64, error) {
	e, modRev, ok, err := s.getIdentity(ctx, name)
	if err == nil && !ok {
		err = identityNotFound(name)
	}
	return e, modRev, err
}

// keepAWriter refuses a change that takes name's admin write away when no
// other enabled identity has it (checked against the view: two such
// changes racing on two meta servers can both pass, and a restart gives
// identity admin its write back).
func (s *Server) keepAWriter(name string) error {
	if s.view.otherWriters(name) == 0 {
		return fmt.Errorf("%w: %s (give another identity admin write first)", errLastAdmin, name)
	}
	return nil
}

// errIdentityRace: an identity kept changing under a read-modify-write.
var errIdentityRace = fmt.Errorf("%w: the identity changed during the update; try again", errConflict)

// updateIdentity changes an identity with change in a compare-and-swap on
// its mod revision (retried when another writer got there first), refusing
// a change that leaves no enabled admin with write access. It returns the
// entry as written and the revision of the write.
func (s *Server) updateIdentity(ctx context.Context, name string, change func(e *auth.Entry) error) (auth.Entry, int64, error) {
	for range 5 {
		e, modRev, err := s.existingIdentity(ctx, name)
		if err != nil {
			return auth.Entry{}, 0, err
		}
		wasWriter := isWriter(&e)
		if err := change(&e); err != nil {
			return auth.Entry{}, 0, err
		}
		if err := e.Validate(); err != nil {
			return auth.Entry{}, 0, badIdentity(err)
		}
		if wasWriter && !isWriter(&e) {
			if err := s.keepAWriter(name); err != nil {
				return auth.Entry{}, 0, err
			}
		}
		e.Updated = time.Now().UTC()
		wrote, rev, err := s.casIdentity(ctx, &e, modRev)
		if err != nil {
			return auth.Entry{}, 0, err
		}
		if wrote {
			return e, rev, nil
		}
	}
	return auth.Entry{}, 0, errIdentityRace
}

// deleteIdentity removes an identity (refusing the last enabled admin with
// write access) and returns it and the revision of the delete.
func (s *Server) deleteIdentity(ctx context.Context, name string) (auth.Entry, int64, error) {
	for range 5 {
		e, modRev, err := s.existingIdentity(ctx, name)
		if err != nil {
			return auth.Entry{}, 0, err
		}
		if isWriter(&e) {
			if err := s.keepAWriter(name); err != nil {
				return auth.Entry{}, 0, err
			}
		}
		key := s.keys.identity(name)
		tctx, cancel := s.store.ctx(ctx)
		resp, err := s.etcd.Txn(tctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).Then(clientv3.OpDelete(key)).Commit()
		cancel()
		if err != nil {
			return auth.Entry{}, 0, etcdErr("identity txn", err)
		}
		if resp.Succeeded {
			return e, resp.Header.Revision, nil
		}
	}
	return auth.Entry{}, 0, errIdentityRace
}

// ensureAdmin makes sure identity "admin" exists, enabled, with AdminWrite
// and secret: it writes nothing when it already does (every meta server of
// a cluster starts with the same token), and overwrites the identity when
// it does not (the token the meta server starts with is the way back in).
// It returns the revision to wait for (0: nothing written).
func (s *Server) ensureAdmin(ctx context.Context, secret string) (int64, error) {
	for range 5 {
		e, modRev, ok, err := s.getIdentity(ctx, AdminIdentity)
		if err != nil {
			return 0, err
		}
		if ok && isWriter(&e) && e.Secret != nil && e.Secret.Verify(secret) {
			return 0, nil
		}
		h, err := auth.HashSecretAnyLength(secret)
		if err != nil {
			return 0, err
		}
		now := time.Now().UTC()
		if !ok {
			e = auth.Entry{Name: AdminIdentity, Created: now}
		}
		e.Kind, e.Group, e.Secret, e.Disabled, e.Updated = auth.KindAdmin, "", h, false, now
		e.Grants.Admin = auth.AdminWrite
		wrote, rev, err := s.casIdentity(ctx, &e, modRev)
		if err != nil {
			return 0, err
		}
		if wrote {
			if ok {
				s.lg.Warn("identity admin did not hold the configured admin token; reset it", zap.String("identity", AdminIdentity))
			} else {
				s.lg.Info("identity admin created from the configured admin token", zap.String("identity", AdminIdentity))
			}
			return rev, nil
		}
	}
	return 0, errIdentityRace
}

func identityNotFound(name string) error {
	return protocol.Errorf(protocol.StatusNotFound, "no identity "+name)
}

// badIdentity turns an auth validation error into a 400.
func badIdentity(err error) error { return fmt.Errorf("%w: %w", errBadInput, err) }

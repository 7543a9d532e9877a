package metaserver

import (
	"context"
	"encoding/json"
	"sort"
	"sync"

	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// view is a meta server's in-memory copy of everything under the prefix,
// loaded with one read and kept current by a watch from the revision after
// it. Lookups are served from it without touching etcd, which is what makes
// them cheap and keeps them working while etcd is unreachable. mu guards
// every field; methods ending in Locked expect it held.
type view struct {
	k  keys
	lg *zap.Logger

	mu        sync.RWMutex
	rev       int64 // etcd revision of the last applied change
	loaded    bool
	brokers   map[brokerKey]brokerEntry
	routes    map[routeKey]routeEntry
	routeTomb map[routeKey]int64 // revision at which a route was deleted
	readonly  map[string]map[string]readonlyRecord
	consumers map[consumerKey]consumerRecord
	offline   map[consumerKey]offlineRecord
	metas     map[string]metaRecord
	ids       identities               // identities/ keys and the policy made of them (identities.go)
	eligible  map[string]eligibleEntry // by group
	changed   chan struct{}            // closed and replaced whenever rev moves
	// unreachable: group → its master's broker id, while that master does
	// not answer after its connection closed (masterwatch.go). Not etcd
	// state: reloads keep it.
	unreachable map[string]string
}

type brokerKey struct {
	group string
	role  protocol.BrokerRole
}

type brokerEntry struct {
	rec    brokerRecord
	modRev int64
}

type eligibleEntry struct {
	rec    eligibleRecord
	modRev int64
}

type routeKey struct {
	kind    protocol.BrokerKind
	subject string
}

type routeEntry struct {
	rec    routeRecord
	modRev int64
}

type consumerKey struct {
	subject, group, clientID string
}

func newView(k keys, lg *zap.Logger) *view {
	v := &view{k: k, lg: lg, changed: make(chan struct{})}
	v.ids.init(lg)
	v.clearLocked()
	return v
}

func (v *view) clearLocked() {
	v.brokers = map[brokerKey]brokerEntry{}
	v.routes = map[routeKey]routeEntry{}
	v.routeTomb = map[routeKey]int64{}
	v.readonly = map[string]map[string]readonlyRecord{}
	v.consumers = map[consumerKey]consumerRecord{}
	v.offline = map[consumerKey]offlineRecord{}
	v.metas = map[string]metaRecord{}
	v.ids.clearLocked()
	v.eligible = map[string]eligibleEntry{}
}

// kv is one key's value at a revision; value nil means deleted.
type kv struct {
	key    string
	value  []byte
	modRev int64
}

// reset replaces the whole view with a read taken at rev.
func (v *view) reset(kvs []kv, rev int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.clearLocked()
	for _, e := range kvs {
		v.applyLocked(e)
	}
	v.loaded = true
	v.ids.publishLocked(rev)
	v.advanceLocked(rev)
}

// apply applies watched changes that happened at revision rev.
func (v *view) apply(changes []kv, rev int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, e := range changes {
		v.applyLocked(e)
	}
	v.ids.publishLocked(0)
	v.advanceLocked(rev)
}

// applyRoute records a route this server just wrote, before the watch
// brings it, so the lookup that caused the write can answer at once. A newer
// change (or deletion) the watch already applied wins.
func (v *view) applyRoute(kind protocol.BrokerKind, subject string, rec routeRecord, modRev int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	rk := routeKey{kind, subject}
	if cur, ok := v.routes[rk]; ok && cur.modRev >= modRev {
		return
	}
	if v.routeTomb[rk] >= modRev {
		return
	}
	v.routes[rk] = routeEntry{rec: rec, modRev: modRev}
}

func (v *view) advanceLocked(rev int64) {
	if rev > v.rev {
		v.rev = rev
		close(v.changed)
		v.changed = make(chan struct{})
	}
}

func (v *view) applyLocked(e kv) {
	dir, parts := v.k.split(e.key)
	del := e.value == nil
	decode := func(into any) bool {
		if err := json.Unmarshal(e.value, into); err != nil {
			v.lg.Warn("ignoring undecodable value", zap.String("key", e.key), zap.Error(err))
			return false
		}
		return true
	}
	switch {
	case dir == dirBrokers && len(parts) == 2:
		role := roleByName(parts[1])
		if role == 0 {
			return
		}
		bk := brokerKey{parts[0], role}
		if del {
			delete(v.brokers, bk)
			return
		}
		var r brokerRecord
		if decode(&r) {
			v.brokers[bk] = brokerEntry{rec: r, modRev: e.modRev}
		}
	case dir == dirRoutes && len(parts) == 2:
		kind := kindByName(parts[0])
		if kind == 0 {
			return
		}
		rk := routeKey{kind, parts[1]}
		if del {
			delete(v.routes, rk)
			v.routeTomb[rk] = e.modRev
			return
		}
		var r routeRecord
		if decode(&r) {
			if cur, ok := v.routes[rk]; ok && cur.modRev > e.modRev {
				return
			}
			v.routes[rk] = routeEntry{rec: r, modRev: e.modRev}
		}
	case dir == dirReadonly && len(parts) == 2:
		if del {
			delete(v.readonly[parts[0]], parts[1])
			if len(v.readonly[parts[0]]) == 0 {
				delete(v.readonly, parts[0])
			}
			return
		}
		var r readonlyRecord
		if decode(&r) {
			if v.readonly[parts[0]] == nil {
				v.readonly[parts[0]] = map[string]readonlyRecord{}
			}
			v.readonly[parts[0]][parts[1]] = r
		}
	case dir == dirConsumers && len(parts) == 3:
		ck := consumerKey{parts[0], parts[1], parts[2]}
		if del {
			delete(v.consumers, ck)
			return
		}
		var r consumerRecord
		if decode(&r) {
			v.consumers[ck] = r
		}
	case dir == dirOffline && len(parts) == 3:
		ck := consumerKey{parts[0], parts[1], parts[2]}
		if del {
			delete(v.offline, ck)
			return
		}
		var r offlineRecord
		if decode(&r) {
			v.offline[ck] = r
		}
	case dir == dirIdentities && len(parts) == 1:
		v.ids.applyLocked(e, parts[0])
	case dir == dirEligible && len(parts) == 1:
		if del {
			delete(v.eligible, parts[0])
			return
		}
		var r eligibleRecord
		if decode(&r) {
			v.eligible[parts[0]] = eligibleEntry{rec: r, modRev: e.modRev}
		}
	case dir == dirMetaServers && len(parts) == 1:
		if del {
			delete(v.metas, parts[0])
			return
		}
		var r metaRecord
		if decode(&r) {
			v.metas[parts[0]] = r
		}
	}
}

// revision returns the revision the view is at and whether it was loaded.
func (v *view) revision() (int64, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.rev, v.loaded
}

// waitRevision waits until the view has applied revision rev.
func (v *view) waitRevision(ctx context.Context, rev int64) error {
	for {
		v.mu.RLock()
		at, ch := v.rev, v.changed
		v.mu.RUnlock()
		if at >= rev {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// groupView is a broker group as derived from its registrations.
type groupView struct {
	name     string
	kind     protocol.BrokerKind
	master   *brokerRecord
	slave    *brokerRecord
	eligible *eligibleRecord // nil: no record
}

func (v *view) groupLocked(name string) groupView {
	g := groupView{name: name}
	if e, ok := v.brokers[brokerKey{name, protocol.RoleMaster}]; ok {
		r := e.rec
		g.master, g.kind = &r, r.Kind
	}
	if e, ok := v.brokers[brokerKey{name, protocol.RoleSlave}]; ok {
		r := e.rec
		g.slave = &r
		if g.kind == 0 {
			g.kind = r.Kind
		}
	}
	if e, ok := v.eligible[name]; ok {
		r := e.rec
		g.eligible = &r
	}
	return g
}

// adminStateLocked is the state the admin API, qmqctl and the console show:
// stateLocked, except that a master marked unreachable (masterwatch.go)
// shows unavailable at once. Lookups keep stateLocked: producers learn of a
// dead master from their own failed sends, and a mark must not move
// traffic or routes.
func (v *view) adminStateLocked(g groupView, subject string) protocol.GroupState {
	if g.master != nil && g.master.BrokerID != "" && v.unreachable[g.name] == g.master.BrokerID {
		return protocol.GroupUnavailable
	}
	return v.stateLocked(g, subject)
}

// stateLocked is the state of group for producers of subject ("" = the
// group's own state, ignoring subject-scoped readonly marks).
func (v *view) stateLocked(g groupView, subject string) protocol.GroupState {
	if g.master == nil {
		return protocol.GroupUnavailable
	}
	if g.master.State == protocol.GroupReadonly {
		return protocol.GroupReadonly
	}
	marks := v.readonly[g.name]
	if _, ok := marks[allSubjects]; ok {
		return protocol.GroupReadonly
	}
	if subject != "" {
		if _, ok := marks[subject]; ok {
			return protocol.GroupReadonly
		}
	}
	return protocol.GroupReadWrite
}

// groupNamesLocked returns every group that has a registration or a route,
// sorted.
func (v *view) groupNamesLocked() []string {
	seen := map[string]bool{}
	for bk := range v.brokers {
		seen[bk.group] = true
	}
	for _, re := range v.routes {
		for _, g := range re.rec.Groups {
			seen[g] = true
		}
	}
	for g := range v.readonly {
		seen[g] = true
	}
	for g := range v.eligible {
		seen[g] = true
	}
	out := make([]string, 0, len(seen))
	for g := range seen {
		out = append(out, g)
	}
	sort.Strings(out)
	return out
}

// routeCountsLocked counts the routes of kind each group is on.
func (v *view) routeCountsLocked(kind protocol.BrokerKind) map[string]int {
	n := map[string]int{}
	for rk, re := range v.routes {
		if rk.kind != kind {
			continue
		}
		for _, g := range re.rec.Groups {
			n[g]++
		}
	}
	return n
}

// writableGroupsLocked returns the groups of kind new routes may use, least
// loaded first: fewest routes, then fewest messages in per second, then
// name.
func (v *view) writableGroupsLocked(kind protocol.BrokerKind) []string {
	counts := v.routeCountsLocked(kind)
	type cand struct {
		name   string
		routes int
		in     uint32
	}
	var cs []cand
	for bk, e := range v.brokers {
		if bk.role != protocol.RoleMaster || e.rec.Kind != kind {
			continue
		}
		g := v.groupLocked(bk.group)
		if v.stateLocked(g, "") != protocol.GroupReadWrite {
			continue
		}
		cs = append(cs, cand{bk.group, counts[bk.group], e.rec.Load.InPerSec})
	}
	sort.Slice(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if a.routes != b.routes {
			return a.routes < b.routes
		}
		if a.in != b.in {
			return a.in < b.in
		}
		return a.name < b.name
	})
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.name
	}
	return out
}

func roleByName(s string) protocol.BrokerRole {
	switch s {
	case "master":
		return protocol.RoleMaster
	case "slave":
		return protocol.RoleSlave
	}
	return 0
}

func kindByName(s string) protocol.BrokerKind {
	switch s {
	case "realtime":
		return protocol.KindRealtime
	case "delay":
		return protocol.KindDelay
	}
	return 0
}

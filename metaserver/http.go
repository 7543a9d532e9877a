package metaserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// httpHandler serves the admin API (package api documents it), the
// console, /metrics, /healthz and /readyz. Every API endpoint and /metrics
// go through guard (authz.go) with the access they need: reads of cluster
// state accessRead, dead-letter bodies accessBodies, identities
// accessAdminRead, changes accessWrite.
func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.guard(accessRead, promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}).ServeHTTP))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", s.handleReady)

	const p = "/api/v1"
	mux.HandleFunc("GET "+p+"/whoami", s.respond(accessOpen, s.whoami))
	mux.HandleFunc("GET "+p+"/status", s.read(func(r *http.Request) (any, error) { return s.status(), nil }))
	mux.HandleFunc("GET "+p+"/brokers", s.read(func(r *http.Request) (any, error) { return s.brokers(), nil }))
	mux.HandleFunc("GET "+p+"/groups", s.read(func(r *http.Request) (any, error) { return s.groups(), nil }))
	mux.HandleFunc("GET "+p+"/routes", s.read(s.listRoutes))
	mux.HandleFunc("GET "+p+"/routes/{subject}", s.read(s.getRoute))
	mux.HandleFunc("POST "+p+"/routes/{subject}/groups", s.change(s.postRouteGroup))
	mux.HandleFunc("DELETE "+p+"/routes/{subject}/groups/{group}", s.change(s.deleteRouteGroup))
	mux.HandleFunc("POST "+p+"/groups/{group}/readonly", s.change(s.postReadonly))
	mux.HandleFunc("DELETE "+p+"/groups/{group}/readonly", s.change(s.deleteReadonly))
	mux.HandleFunc("POST "+p+"/groups/{group}/switchover", s.change(s.postSwitchover))
	mux.HandleFunc("POST "+p+"/groups/{group}/failover", s.change(s.postForceFailover))
	mux.HandleFunc("GET "+p+"/consumers", s.read(func(r *http.Request) (any, error) {
		return s.consumerGroups(r.Context(), r.URL.Query().Get("subject"))
	}))
	mux.HandleFunc("GET "+p+"/subjects/{subject}", s.read(s.getSubject))
	mux.HandleFunc("POST "+p+"/consumers/{subject}/{group}/reset", s.change(s.postReset))
	mux.HandleFunc("POST "+p+"/consumers/{subject}/{group}/{id}/offline", s.change(s.consumerOnline(false)))
	mux.HandleFunc("POST "+p+"/consumers/{subject}/{group}/{id}/online", s.change(s.consumerOnline(true)))
	mux.HandleFunc("GET "+p+"/deadletters/{subject}/{group}", s.read(s.listDeadLetters))
	mux.HandleFunc("GET "+p+"/deadletters/{subject}/{group}/{id}", s.respond(accessBodies, s.inspectDeadLetter))
	mux.HandleFunc("POST "+p+"/deadletters/{subject}/{group}/redrive", s.change(s.deadLetterAction(protocol.DeadLettersRedrive)))
	mux.HandleFunc("POST "+p+"/deadletters/{subject}/{group}/purge", s.change(s.deadLetterAction(protocol.DeadLettersPurge)))
	mux.HandleFunc("GET "+p+"/messages", s.read(s.getMessages))
	mux.HandleFunc("GET "+p+"/trace", s.read(s.getTrace))
	mux.HandleFunc("GET "+p+"/history", s.read(s.getHistory))
	s.identityRoutes(mux, p)
	mux.Handle("/api/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Errorf("no API endpoint %s %s", r.Method, r.URL.Path))
	}))
	mux.Handle("/", consoleHandler())
	return mux
}

func (s *Server) handleReady(w http.ResponseWriter, _ *http.Request) {
	if _, loaded := s.view.revision(); !loaded || !s.store.watching.Load() || !s.store.etcdOK.Load() {
		http.Error(w, "not ready: etcd is unreachable or the watch is not established; lookups are served from the last view", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// respond wraps an endpoint that reads: guarded by need, answering fn's
// value as JSON.
func (s *Server) respond(need access, fn func(r *http.Request) (any, error)) http.HandlerFunc {
	return s.guard(need, func(w http.ResponseWriter, r *http.Request) {
		v, err := fn(r)
		if err != nil {
			writeError(w, httpStatus(err), err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
}

// read wraps an endpoint that reads cluster state (accessRead).
func (s *Server) read(fn func(r *http.Request) (any, error)) http.HandlerFunc {
	return s.respond(accessRead, fn)
}

// change wraps an endpoint that changes something: fn runs only for an
// identity with admin write (refusals are answered 401 or 403 before it),
// and each change is logged with the identity that made it.
func (s *Server) change(fn func(r *http.Request) (any, error)) http.HandlerFunc {
	return s.guard(accessWrite, func(w http.ResponseWriter, r *http.Request) {
		who := zap.String("identity", identityName(principalOf(r.Context())))
		v, err := fn(r)
		if err != nil {
			s.metrics.adminChanges.WithLabelValues("error").Inc()
			s.lg.Warn("admin change failed", zap.String("method", r.Method), zap.String("path", r.URL.Path), who, zap.Error(err))
			writeError(w, httpStatus(err), err)
			return
		}
		s.metrics.adminChanges.WithLabelValues("ok").Inc()
		s.lg.Info("admin change", zap.String("method", r.Method), zap.String("path", r.URL.Path), who)
		writeJSON(w, http.StatusOK, v)
	})
}

// httpStatus maps an error to its HTTP status.
func httpStatus(err error) int {
	if st := switchoverStatus(err); st != 0 {
		return st
	}
	var pe *protocol.Error
	switch {
	case errors.Is(err, errLastGroup), errors.Is(err, errConflict):
		return http.StatusConflict
	case errors.Is(err, errAllFailed):
		return http.StatusBadGateway
	case errors.Is(err, errEtcd), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	case errors.As(err, &pe):
		switch pe.Status {
		case protocol.StatusNotFound, protocol.StatusUnknownGroup:
			return http.StatusNotFound
		case protocol.StatusInvalid, protocol.StatusBadRequest:
			return http.StatusBadRequest
		case protocol.StatusBusy:
			return http.StatusConflict
		case protocol.StatusUnavailable, protocol.StatusShuttingDown:
			return http.StatusServiceUnavailable
		}
	case errors.Is(err, errBadInput):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// errBadInput wraps request bodies and parameters that do not parse.
var errBadInput = errors.New("bad input")

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, api.Error{Error: err.Error()})
}

func decodeBody(r *http.Request, into any) error {
	if r.ContentLength == 0 {
		return nil
	}
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("%w: request body: %w", errBadInput, err)
	}
	return nil
}

// --- reads ---

func (s *Server) groupCounts() api.GroupCounts {
	var c api.GroupCounts
	for _, g := range s.groups() {
		c.Total++
		switch g.State {
		case protocol.GroupReadWrite.String():
			c.ReadWrite++
		case protocol.GroupReadonly.String():
			c.Readonly++
		default:
			c.Unavailable++
		}
	}
	return c
}

func (s *Server) status() api.Status {
	v := s.view
	v.mu.RLock()
	st := api.Status{Revision: v.rev, Prefix: s.opts.Prefix, MetaServers: []api.MetaServer{}, Brokers: len(v.brokers), Consumers: len(v.consumers)}
	for id, m := range v.metas {
		st.MetaServers = append(st.MetaServers, api.MetaServer{ID: id, TCP: m.TCP, HTTP: m.HTTP, StartedAt: m.StartedAt})
	}
	subjects := map[string]bool{}
	for rk := range v.routes {
		subjects[rk.subject] = true
	}
	st.Subjects = len(subjects)
	for bk, e := range v.brokers {
		if bk.role != protocol.RoleMaster {
			continue
		}
		st.InPerSec += uint64(e.rec.Load.InPerSec)
		st.OutPerSec += uint64(e.rec.Load.OutPerSec)
		lag := groupLag(v.groupLocked(bk.group))
		if lag == nil {
			st.Replication.WithoutSlave++
			continue
		}
		st.Replication.WithSlave++
		st.Replication.MaxLag.Bytes = max(st.Replication.MaxLag.Bytes, lag.Bytes)
		st.Replication.MaxLag.Millis = max(st.Replication.MaxLag.Millis, lag.Millis)
	}
	v.mu.RUnlock()
	sort.Slice(st.MetaServers, func(i, j int) bool { return st.MetaServers[i].ID < st.MetaServers[j].ID })
	st.Groups = s.groupCounts()
	return st
}

func (s *Server) brokers() []api.Broker {
	v := s.view
	v.mu.RLock()
	out := make([]api.Broker, 0, len(v.brokers))
	for _, e := range v.brokers {
		r := e.rec
		b := api.Broker{
			Group: r.Group, Role: r.Role.String(), Kind: r.Kind.String(), State: r.State.String(), Epoch: r.Epoch,
			BrokerID: r.BrokerID, Address: r.Address, LeaseID: r.LeaseID, Load: apiLoad(r.Load), RegisteredAt: r.RegisteredAt,
		}
		if m, ok := v.brokers[brokerKey{r.Group, protocol.RoleMaster}]; ok {
			b.Master = m.rec.Address
		}
		out = append(out, b)
	}
	v.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Group != out[j].Group {
			return out[i].Group < out[j].Group
		}
		return out[i].Role < out[j].Role
	})
	return out
}

func apiLoad(l protocol.BrokerLoad) api.Load {
	return api.Load{InPerSec: l.InPerSec, OutPerSec: l.OutPerSec, Subjects: l.Subjects, StoredBytes: l.StoredBytes, Pending: l.Pending,
		ReplicaLagBytes: l.ReplicaLagBytes, ReplicaLagMillis: l.ReplicaLagMillis}
}

// groupLag is how far g's slave is behind: the larger of what its master
// and its slave report (each sees the other's ends a heartbeat late); nil
// without a slave.
func groupLag(g groupView) *api.Lag {
	if g.slave == nil {
		return nil
	}
	l := &api.Lag{Bytes: g.slave.Load.ReplicaLagBytes, Millis: g.slave.Load.ReplicaLagMillis}
	if g.master != nil {
		l.Bytes = max(l.Bytes, g.master.Load.ReplicaLagBytes)
		l.Millis = max(l.Millis, g.master.Load.ReplicaLagMillis)
	}
	return l
}

func (s *Server) groups() []api.Group {
	v := s.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	counts := map[string]int{}
	kinds := map[string]protocol.BrokerKind{}
	for rk, re := range v.routes {
		for _, g := range re.rec.Groups {
			counts[g]++
			kinds[g] = rk.kind
		}
	}
	names := v.groupNamesLocked()
	out := make([]api.Group, 0, len(names))
	for _, name := range names {
		g := v.groupLocked(name)
		kind := g.kind
		if kind == 0 {
			kind = kinds[name]
		}
		ag := api.Group{Name: name, Kind: kind.String(), State: v.adminStateLocked(g, "").String(), Routes: counts[name]}
		if kind == 0 {
			ag.Kind = ""
		}
		if g.master != nil {
			ag.Master, ag.MasterID, ag.Epoch, ag.Load = g.master.Address, g.master.BrokerID, g.master.Epoch, apiLoad(g.master.Load)
		}
		if g.slave != nil {
			ag.Slave, ag.SlaveID, ag.SlaveEpoch = g.slave.Address, g.slave.BrokerID, g.slave.Epoch
		}
		ag.Lag = groupLag(g)
		failoverFields(&ag, g)
		for subj := range v.readonly[name] {
			ag.Readonly = append(ag.Readonly, subj)
		}
		sort.Strings(ag.Readonly)
		out = append(out, ag)
	}
	return out
}

func (s *Server) group(name string) api.Group {
	for _, g := range s.groups() {
		if g.Name == name {
			return g
		}
	}
	return api.Group{Name: name, State: protocol.GroupUnavailable.String()}
}

// routes returns every route, or only subject's when subject is not empty.
func (s *Server) routes(subject string) []api.Route {
	v := s.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := []api.Route{}
	for rk, re := range v.routes {
		if subject != "" && rk.subject != subject {
			continue
		}
		r := api.Route{Subject: rk.subject, Kind: rk.kind.String(), Version: re.modRev, CreatedAt: re.rec.CreatedAt, Groups: []api.RouteGroup{}}
		for _, name := range re.rec.Groups {
			g := v.groupLocked(name)
			rg := api.RouteGroup{Group: name, State: v.adminStateLocked(g, rk.subject).String()}
			if g.master != nil {
				rg.Master, rg.Epoch = g.master.Address, g.master.Epoch
			}
			r.Groups = append(r.Groups, rg)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Subject != out[j].Subject {
			return out[i].Subject < out[j].Subject
		}
		return out[i].Kind > out[j].Kind // realtime before delay
	})
	return out
}

// listRoutes lists every route, or with ?subject= every route of one subject
// (its realtime and its delay route), 404 when it has none.
func (s *Server) listRoutes(r *http.Request) (any, error) {
	subject := r.URL.Query().Get("subject")
	rs := s.routes(subject)
	if subject != "" && len(rs) == 0 {
		return nil, protocol.Errorf(protocol.StatusNotFound, "subject "+subject+" has no route")
	}
	return rs, nil
}

// getRoute returns subject's realtime route (its first; listRoutes with
// ?subject= returns the delay route too).
func (s *Server) getRoute(r *http.Request) (any, error) {
	subject := r.PathValue("subject")
	rs := s.routes(subject)
	if len(rs) == 0 {
		return nil, protocol.Errorf(protocol.StatusNotFound, "subject "+subject+" has no route")
	}
	return rs[0], nil
}

// getSubject answers the console's subject page: the subject's routes,
// and its messages, in-rate and consumer groups (backlog per broker group,
// consumers with their un-acked messages and last pull) as the masters of
// its realtime route report them.
func (s *Server) getSubject(r *http.Request) (any, error) {
	subject := r.PathValue("subject")
	if err := s.limits.CheckSubject(subject); err != nil {
		return nil, err
	}
	routes := s.routes(subject)
	var totals subjectTotals
	groups, err := s.consumerGroupsOf(r.Context(), subject, &totals)
	if err != nil {
		return nil, err
	}
	if len(routes) == 0 && len(groups) == 0 {
		return nil, protocol.Errorf(protocol.StatusNotFound, "subject "+subject+" has no route and no consumers")
	}
	return api.Subject{Subject: subject, Routes: routes, Messages: totals.messages, InPerSec: totals.inPerSec,
		Groups: groups, Errors: totals.failures}, nil
}

// routeOf returns subject's route of kind after a change.
func (s *Server) routeOf(subject string, kind protocol.BrokerKind) api.Route {
	for _, r := range s.routes(subject) {
		if r.Kind == kind.String() {
			return r
		}
	}
	return api.Route{Subject: subject, Kind: kind.String(), Groups: []api.RouteGroup{}}
}

// --- changes ---

func (s *Server) postRouteGroup(r *http.Request) (any, error) {
	var in api.GroupRequest
	if err := decodeBody(r, &in); err != nil {
		return nil, err
	}
	subject := r.PathValue("subject")
	kind, err := s.addRouteGroup(r.Context(), subject, in.Group)
	if err != nil {
		return nil, err
	}
	return s.routeOf(subject, kind), nil
}

func (s *Server) deleteRouteGroup(r *http.Request) (any, error) {
	subject := r.PathValue("subject")
	kind, err := s.removeRouteGroup(r.Context(), subject, r.PathValue("group"))
	if err != nil {
		return nil, err
	}
	return s.routeOf(subject, kind), nil
}

func readonlySubject(subject string) (string, error) {
	if subject == "" || subject == allSubjects {
		return allSubjects, nil
	}
	if err := protocol.DefaultLimits.CheckSubject(subject); err != nil {
		return "", err
	}
	return subject, nil
}

func (s *Server) postReadonly(r *http.Request) (any, error) {
	var in api.ReadonlyRequest
	if err := decodeBody(r, &in); err != nil {
		return nil, err
	}
	group := r.PathValue("group")
	if !protocol.IsName(group) {
		return nil, protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("group %q must be A-Z a-z 0-9 . _ -", group))
	}
	if s.groupKind(group) == 0 {
		return nil, protocol.Errorf(protocol.StatusNotFound, fmt.Sprintf("broker group %q is not registered", group))
	}
	subject, err := readonlySubject(in.Subject)
	if err != nil {
		return nil, err
	}
	rev, err := s.store.putJSON(r.Context(), s.keys.readonly(group, subject), readonlyRecord{At: time.Now().UTC()}, 0)
	if err != nil {
		return nil, err
	}
	if err := s.waitView(r.Context(), rev); err != nil {
		return nil, err
	}
	return s.group(group), nil
}

func (s *Server) deleteReadonly(r *http.Request) (any, error) {
	group := r.PathValue("group")
	subject, err := readonlySubject(r.URL.Query().Get("subject"))
	if err != nil {
		return nil, err
	}
	rev, err := s.store.delete(r.Context(), s.keys.readonly(group, subject))
	if err != nil {
		return nil, err
	}
	if err := s.waitView(r.Context(), rev); err != nil {
		return nil, err
	}
	return s.group(group), nil
}

// parseResetTarget turns "earliest", "latest" or an RFC 3339 time into a
// manage action.
func parseResetTarget(to string) (protocol.ManageAction, time.Time, error) {
	switch strings.ToLower(to) {
	case "earliest":
		return protocol.ManageResetEarliest, time.Time{}, nil
	case "latest":
		return protocol.ManageResetLatest, time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, to)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("%w: reset target %q is not earliest, latest or an RFC 3339 time", errBadInput, to)
	}
	return protocol.ManageResetTime, t, nil
}

func (s *Server) checkSubjectGroup(subject, group string) error {
	if err := s.limits.CheckSubject(subject); err != nil {
		return err
	}
	return s.limits.CheckGroup(group)
}

func (s *Server) postReset(r *http.Request) (any, error) {
	var in api.ResetRequest
	if err := decodeBody(r, &in); err != nil {
		return nil, err
	}
	subject, group := r.PathValue("subject"), r.PathValue("group")
	if err := s.checkSubjectGroup(subject, group); err != nil {
		return nil, err
	}
	action, at, err := parseResetTarget(in.To)
	if err != nil {
		return nil, err
	}
	if _, routed := s.routeTargets(subject); routed && !in.Create {
		// A reset of a group no broker has would create it there: a typo
		// must not, so creating one takes "create".
		if known, failed := s.consumerGroupKnown(r.Context(), subject, group); !known {
			return nil, errUnknownConsumerGroup(subject, group, failed, `; to create it at that position pass "create": true (qmqctl offset reset --create)`)
		}
	}
	return s.manageConsumers(r.Context(), protocol.ConsumerManageRequest{Action: action, Subject: subject, Group: group, Time: at})
}

// consumerOnline takes a consumer offline or online: the mark is kept in
// etcd (lookups and heartbeats tell the consumer), then relayed to the
// masters so they stop or resume handing it messages at once. A relay
// failure does not fail the request once the mark is stored; the answer
// lists it.
func (s *Server) consumerOnline(online bool) func(r *http.Request) (any, error) {
	return func(r *http.Request) (any, error) {
		subject, group, id := r.PathValue("subject"), r.PathValue("group"), r.PathValue("id")
		if err := s.checkSubjectGroup(subject, group); err != nil {
			return nil, err
		}
		if err := protocol.CheckConsumerID(id); err != nil {
			return nil, err
		}
		if err := s.checkConsumerKnown(subject, group, id); err != nil {
			return nil, err
		}
		key := s.keys.offline(subject, group, id)
		var rev int64
		var err error
		action := protocol.ManageConsumerOnline
		if online {
			rev, err = s.store.delete(r.Context(), key)
		} else {
			action = protocol.ManageConsumerOffline
			rev, err = s.store.putJSON(r.Context(), key, offlineRecord{At: time.Now().UTC()}, 0)
		}
		if err != nil {
			return nil, err
		}
		if err := s.waitView(r.Context(), rev); err != nil {
			return nil, err
		}
		res, err := s.manageConsumers(r.Context(), protocol.ConsumerManageRequest{Action: action, Subject: subject, Group: group, Consumer: id})
		if err != nil && !errors.Is(err, errAllFailed) && !errors.Is(err, protocol.ErrNotFound) {
			return nil, err
		}
		if res.OK == nil {
			res.OK = []string{}
		}
		return res, nil
	}
}

func (s *Server) listDeadLetters(r *http.Request) (any, error) {
	subject, group := r.PathValue("subject"), r.PathValue("group")
	if err := s.checkSubjectGroup(subject, group); err != nil {
		return nil, err
	}
	q := r.URL.Query()
	req := protocol.DeadLettersRequest{Action: protocol.DeadLettersList, Subject: subject, Group: group, Max: 100}
	if a := q.Get("after"); a != "" {
		n, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: after=%q", errBadInput, a)
		}
		req.After = n
	}
	if m := q.Get("max"); m != "" {
		n, err := strconv.ParseUint(m, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%w: max=%q", errBadInput, m)
		}
		if n > 0 {
			req.Max = uint32(n)
		}
	}
	d, err := s.deadLetters(r.Context(), req)
	if err != nil {
		return nil, err
	}
	if d.Total == 0 && len(d.Letters) == 0 && req.After == 0 {
		if known, failed := s.consumerGroupKnown(r.Context(), subject, group); !known {
			return nil, errUnknownConsumerGroup(subject, group, failed, "")
		}
	}
	if p := principalOf(r.Context()); p == nil || !p.CanReadBodies() {
		hideBodies(&d)
	}
	return d, nil
}

// hideBodies blanks the bodies of a listing for a caller without the read
// bodies right (who still sees ids, sizes and attempts).
func hideBodies(d *api.DeadLetters) {
	for i := range d.Letters {
		d.Letters[i].Body, d.Letters[i].BodyBase64, d.Letters[i].BodyHidden = "", false, true
	}
}

func (s *Server) inspectDeadLetter(r *http.Request) (any, error) {
	subject, group, id := r.PathValue("subject"), r.PathValue("group"), r.PathValue("id")
	if err := s.checkSubjectGroup(subject, group); err != nil {
		return nil, err
	}
	d, err := s.deadLetters(r.Context(), protocol.DeadLettersRequest{Action: protocol.DeadLettersInspect, Subject: subject, Group: group, IDs: []string{id}})
	if err != nil {
		return nil, err
	}
	if len(d.Letters) == 0 && len(d.Errors) == 0 {
		return nil, protocol.Errorf(protocol.StatusNotFound, fmt.Sprintf("no dead letter %s in %s/%s", id, subject, group))
	}
	return d, nil
}

func (s *Server) deadLetterAction(action protocol.DeadLetterAction) func(r *http.Request) (any, error) {
	return func(r *http.Request) (any, error) {
		var in api.DeadLetterAction
		if err := decodeBody(r, &in); err != nil {
			return nil, err
		}
		subject, group := r.PathValue("subject"), r.PathValue("group")
		if err := s.checkSubjectGroup(subject, group); err != nil {
			return nil, err
		}
		ids := slices.DeleteFunc(in.IDs, func(id string) bool { return id == "" })
		d, err := s.deadLetters(r.Context(), protocol.DeadLettersRequest{Action: action, Subject: subject, Group: group, IDs: ids})
		if err != nil || d.Affected > 0 || len(d.Errors) > 0 {
			return d, err
		}
		// Nothing happened: say why when it is a name nobody knows.
		if known, failed := s.consumerGroupKnown(r.Context(), subject, group); !known {
			return nil, errUnknownConsumerGroup(subject, group, failed, "")
		}
		if len(ids) > 0 {
			return nil, protocol.Errorf(protocol.StatusNotFound, fmt.Sprintf("no dead letter with id %s in %s/%s: nothing was changed",
				strings.Join(ids, ", "), subject, group))
		}
		return d, nil
	}
}

// checkConsumerKnown fails with a 404 naming the consumer unless it is
// registered with the meta server (it heartbeats) or marked offline.
func (s *Server) checkConsumerKnown(subject, group, id string) error {
	v := s.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	k := consumerKey{subject, group, id}
	if _, ok := v.consumers[k]; ok {
		return nil
	}
	if _, ok := v.offline[k]; ok {
		return nil
	}
	var known []string
	for ck := range v.consumers {
		if ck.subject == subject && ck.group == group {
			known = append(known, ck.clientID)
		}
	}
	slices.Sort(known)
	msg := fmt.Sprintf("consumer %q is not registered in %s/%s", id, subject, group)
	if len(known) > 0 {
		msg += " (registered: " + strings.Join(known, ", ") + ")"
	} else {
		msg += " (no consumer of it is registered)"
	}
	return protocol.Errorf(protocol.StatusNotFound, msg)
}

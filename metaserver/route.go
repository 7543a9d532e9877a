package metaserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// lookup serves CmdLookup from the view; a subject's first lookup assigns
// its route in etcd.
func (s *Server) lookup(ctx context.Context, req protocol.LookupRequest) (protocol.LookupResponse, error) {
	kind := protocol.KindRealtime
	switch req.ClientType {
	case protocol.ClientProducer, protocol.ClientConsumer:
	case protocol.ClientDelayProducer:
		kind = protocol.KindDelay
	default:
		return protocol.LookupResponse{}, protocol.Errorf(protocol.StatusInvalid, "unknown client type "+req.ClientType.String())
	}
	subject := protocol.RealSubject(req.Subject)
	if err := s.limits.CheckSubject(subject); err != nil {
		return protocol.LookupResponse{}, err
	}
	if resp, ok := s.routeResponse(kind, subject, req); ok {
		return resp, nil
	}
	if _, _, err := s.assignRoute(ctx, kind, subject); err != nil {
		return protocol.LookupResponse{}, err
	}
	resp, _ := s.routeResponse(kind, subject, req)
	return resp, nil
}

// routeResponse builds the answer to req from the view; false when the
// subject has no route of kind yet.
func (s *Server) routeResponse(kind protocol.BrokerKind, subject string, req protocol.LookupRequest) (protocol.LookupResponse, bool) {
	v := s.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	re, ok := v.routes[routeKey{kind, subject}]
	if !ok {
		return protocol.LookupResponse{}, false
	}
	resp := protocol.LookupResponse{
		Version:   uint64(max(v.rev, re.modRev)),
		Timestamp: time.Now(),
		Groups:    make([]protocol.RouteGroup, 0, len(re.rec.Groups)),
	}
	if req.ClientType == protocol.ClientConsumer && req.Group != "" {
		if _, off := v.offline[consumerKey{subject, req.Group, req.ClientID}]; off {
			resp.Flags |= protocol.LookupConsumerOffline
		}
	}
	for _, name := range re.rec.Groups {
		g := v.groupLocked(name)
		rg := protocol.RouteGroup{Group: name, Kind: kind, State: v.stateLocked(g, subject)}
		if g.master != nil {
			rg.Master, rg.Epoch = g.master.Address, g.master.Epoch
		}
		if g.slave != nil {
			rg.Slave = g.slave.Address
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, true
}

// assignRoute gives subject its first route: MinGroups writable groups of
// kind, least loaded first, created in an etcd transaction so that meta
// servers racing on the same subject all end with the one that won.
//
// Assignments on one server are serialised (they happen once per subject) so
// that a burst of new subjects spreads over the groups: each sees the routes
// the previous ones created.
func (s *Server) assignRoute(ctx context.Context, kind protocol.BrokerKind, subject string) (routeRecord, int64, error) {
	s.assignMu.Lock()
	defer s.assignMu.Unlock()
	s.view.mu.RLock()
	if re, ok := s.view.routes[routeKey{kind, subject}]; ok {
		s.view.mu.RUnlock()
		return re.rec, re.modRev, nil
	}
	cands := s.view.writableGroupsLocked(kind)
	s.view.mu.RUnlock()
	if len(cands) == 0 {
		return routeRecord{}, 0, protocol.Errorf(protocol.StatusUnavailable, fmt.Sprintf("no writable %s group to route %s to", kind, subject))
	}
	rec := routeRecord{Groups: cands[:min(s.opts.MinGroups, len(cands))], CreatedAt: time.Now().UTC()}
	got, rev, err := s.store.createRoute(ctx, kind, subject, rec)
	if err != nil {
		return routeRecord{}, 0, unavailable(err)
	}
	s.view.applyRoute(kind, subject, got, rev)
	if slices.Equal(got.Groups, rec.Groups) && got.CreatedAt.Equal(rec.CreatedAt) {
		s.metrics.routesAssigned.Inc()
		s.lg.Info("route assigned", zap.String("subject", subject), zap.Stringer("kind", kind), zap.Strings("groups", got.Groups))
	}
	return got, rev, nil
}

// errRouteConflict: the route changed under an admin change too often.
var errRouteConflict = protocol.Errorf(protocol.StatusBusy, "route changed concurrently; try again")

// updateRoute applies change to subject's route in a compare-and-swap loop
// and waits until the view shows the result. change returns the new groups
// or an error; created tells it whether the route exists.
func (s *Server) updateRoute(ctx context.Context, kind protocol.BrokerKind, subject string, change func(groups []string, exists bool) ([]string, error)) error {
	for range 8 {
		cur, modRev, err := s.store.getRoute(ctx, kind, subject)
		if err != nil {
			return unavailable(err)
		}
		groups, err := change(slices.Clone(cur.Groups), modRev != 0)
		if err != nil {
			return err
		}
		if slices.Equal(groups, cur.Groups) {
			return nil
		}
		next := routeRecord{Groups: groups, CreatedAt: cur.CreatedAt}
		if modRev == 0 {
			next.CreatedAt = time.Now().UTC()
		}
		ok, rev, err := s.store.casRoute(ctx, kind, subject, next, modRev)
		if err != nil {
			return unavailable(err)
		}
		if ok {
			s.lg.Info("route changed", zap.String("subject", subject), zap.Stringer("kind", kind), zap.Strings("groups", groups))
			return s.waitView(ctx, rev)
		}
	}
	return errRouteConflict
}

// waitView waits (bounded by the etcd timeout) until the view has applied
// rev, so an admin change is visible in the answer to the request that made
// it.
func (s *Server) waitView(ctx context.Context, rev int64) error {
	ctx, cancel := s.store.ctx(ctx)
	defer cancel()
	if err := s.view.waitRevision(ctx, rev); err != nil {
		return unavailable(fmt.Errorf("waiting for the watch to reach revision %d: %w", rev, err))
	}
	return nil
}

// groupKind returns the kind of a known group, from its registrations or
// the routes it is on; 0 when the group is unknown.
func (s *Server) groupKind(group string) protocol.BrokerKind {
	v := s.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	if g := v.groupLocked(group); g.kind != 0 {
		return g.kind
	}
	for rk, re := range v.routes {
		if slices.Contains(re.rec.Groups, group) {
			return rk.kind
		}
	}
	return 0
}

// addRouteGroup adds group to subject's route of the group's kind,
// creating the route when there is none.
func (s *Server) addRouteGroup(ctx context.Context, subject, group string) (protocol.BrokerKind, error) {
	if err := s.limits.CheckSubject(subject); err != nil {
		return 0, err
	}
	kind := s.groupKind(group)
	if kind == 0 {
		return 0, protocol.Errorf(protocol.StatusNotFound, fmt.Sprintf("broker group %q is not registered", group))
	}
	return kind, s.updateRoute(ctx, kind, subject, func(groups []string, _ bool) ([]string, error) {
		if slices.Contains(groups, group) {
			return groups, nil
		}
		return append(groups, group), nil
	})
}

// removeRouteGroup removes group from subject's route; the last group of a
// route is never removed.
func (s *Server) removeRouteGroup(ctx context.Context, subject, group string) (protocol.BrokerKind, error) {
	kind := s.routeKindWith(subject, group)
	if kind == 0 {
		return 0, protocol.Errorf(protocol.StatusNotFound, fmt.Sprintf("group %s is not on the route of %s", group, subject))
	}
	return kind, s.updateRoute(ctx, kind, subject, func(groups []string, exists bool) ([]string, error) {
		i := slices.Index(groups, group)
		if !exists || i < 0 {
			return nil, protocol.Errorf(protocol.StatusNotFound, fmt.Sprintf("group %s is not on the route of %s", group, subject))
		}
		if len(groups) == 1 {
			return nil, errLastGroup
		}
		return slices.Delete(groups, i, i+1), nil
	})
}

// errLastGroup: removing a route's only group would leave the subject with
// nowhere to go.
var errLastGroup = errors.New("cannot remove the last group of a route")

// routeKindWith returns the kind of subject's route that holds group.
func (s *Server) routeKindWith(subject, group string) protocol.BrokerKind {
	v := s.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, kind := range []protocol.BrokerKind{protocol.KindRealtime, protocol.KindDelay} {
		if re, ok := v.routes[routeKey{kind, subject}]; ok && slices.Contains(re.rec.Groups, group) {
			return kind
		}
	}
	return 0
}

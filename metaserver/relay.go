package metaserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// caller sends requests to brokers; *transport.Client is the real one.
type caller interface {
	Call(ctx context.Context, addr string, cmd protocol.Command, body []byte) ([]byte, error)
	// Go sends without waiting and calls fn with the answer within
	// timeout, which may exceed the client's request timeout.
	Go(addr string, cmd protocol.Command, body []byte, timeout time.Duration, fn func(body []byte, err error)) error
}

// target is one broker group's master to relay to.
type target struct {
	group, addr string
}

// relayResult is one target's answer.
type relayResult struct {
	group string
	body  []byte
	err   error
}

// errNoMaster: a group on the route has no live master to relay to.
var errNoMaster = errors.New("no live master")

// routeTargets returns the masters of every group on subject's realtime
// route (targets with an empty addr have no live master); false when the
// subject has no route.
func (s *Server) routeTargets(subject string) ([]target, bool) {
	return s.routeTargetsOf(protocol.KindRealtime, subject)
}

// routeTargetsOf returns the masters of subject's route of kind, and
// whether it has one.
func (s *Server) routeTargetsOf(kind protocol.BrokerKind, subject string) ([]target, bool) {
	v := s.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	re, ok := v.routes[routeKey{kind, subject}]
	if !ok {
		return nil, false
	}
	out := make([]target, 0, len(re.rec.Groups))
	for _, name := range re.rec.Groups {
		t := target{group: name}
		if g := v.groupLocked(name); g.master != nil {
			t.addr = g.master.Address
		}
		out = append(out, t)
	}
	return out, true
}

// delayRouteMasters returns the masters of subject's delay route (none
// before a delayed message of the subject was sent).
func (s *Server) delayRouteMasters(subject string) []target {
	out, _ := s.routeTargetsOf(protocol.KindDelay, subject)
	return out
}

// realtimeMasters returns every live realtime master.
func (s *Server) realtimeMasters() []target { return s.masters(protocol.KindRealtime) }

// delayMasters returns every live delay master.
func (s *Server) delayMasters() []target { return s.masters(protocol.KindDelay) }

// masters returns every live master of kind, by group.
func (s *Server) masters(kind protocol.BrokerKind) []target {
	v := s.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []target
	for bk, e := range v.brokers {
		if bk.role == protocol.RoleMaster && e.rec.Kind == kind {
			out = append(out, target{group: bk.group, addr: e.rec.Address})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].group < out[j].group })
	return out
}

// relay sends cmd with body to every target at once and returns the answers
// in target order.
func (s *Server) relay(ctx context.Context, targets []target, cmd protocol.Command, body []byte) []relayResult {
	out := make([]relayResult, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		out[i].group = t.group
		if t.addr == "" {
			out[i].err = errNoMaster
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, s.opts.BrokerTimeout)
			defer cancel()
			out[i].body, out[i].err = s.caller.Call(cctx, t.addr, cmd, body)
		}()
	}
	wg.Wait()
	s.metrics.relayed.WithLabelValues(cmd.String()).Add(float64(len(targets)))
	return out
}

// errAllFailed: every broker relayed to failed.
var errAllFailed = errors.New("every broker group failed")

// actionResult sums up relay results; it fails only when every target did.
func actionResult(results []relayResult) (api.ActionResult, error) {
	r := api.ActionResult{OK: []string{}}
	for _, x := range results {
		if x.err != nil {
			r.Errors = append(r.Errors, api.BrokerFailure{BrokerGroup: x.group, Error: x.err.Error()})
			continue
		}
		r.OK = append(r.OK, x.group)
	}
	if len(r.OK) == 0 && len(r.Errors) > 0 {
		return r, fmt.Errorf("%w: %s: %s", errAllFailed, r.Errors[0].BrokerGroup, r.Errors[0].Error)
	}
	return r, nil
}

// manageConsumers relays a CmdConsumerManage to the masters of subject's
// route.
func (s *Server) manageConsumers(ctx context.Context, req protocol.ConsumerManageRequest) (api.ActionResult, error) {
	targets, ok := s.routeTargets(req.Subject)
	if !ok {
		return api.ActionResult{}, protocol.Errorf(protocol.StatusNotFound, "subject "+req.Subject+" has no route")
	}
	return actionResult(s.relay(ctx, targets, protocol.CmdConsumerManage, protocol.AppendConsumerManageRequest(nil, &req)))
}

// consumerGroups lists consumer groups (of subject, or of every subject)
// with their registered consumers and the backlog the masters report.
func (s *Server) consumerGroups(ctx context.Context, subject string) ([]api.ConsumerGroup, error) {
	return s.consumerGroupsOf(ctx, subject, nil)
}

// subjectTotals is what the masters report of one subject itself.
type subjectTotals struct {
	messages, inPerSec uint64
	failures           []api.BrokerFailure
}

// consumerGroupsOf is consumerGroups; with subject set and totals not nil
// it also adds up the subject's messages and in-rate into totals.
func (s *Server) consumerGroupsOf(ctx context.Context, subject string, totals *subjectTotals) ([]api.ConsumerGroup, error) {
	type cgKey struct{ subject, group string }
	groups := map[cgKey]*api.ConsumerGroup{}
	get := func(k cgKey) *api.ConsumerGroup {
		g := groups[k]
		if g == nil {
			g = &api.ConsumerGroup{Subject: k.subject, Group: k.group, Consumers: []api.Consumer{}, PerBroker: []api.GroupBacklog{}}
			groups[k] = g
		}
		return g
	}
	var targets []target
	v := s.view
	v.mu.RLock()
	for ck, c := range v.consumers {
		if subject != "" && ck.subject != subject {
			continue
		}
		_, off := v.offline[ck]
		get(cgKey{ck.subject, ck.group}).Consumers = append(get(cgKey{ck.subject, ck.group}).Consumers, api.Consumer{
			Subject: ck.subject, Group: ck.group, ClientID: ck.clientID, ClientType: c.ClientType.String(),
			Online: !off, Since: c.Since,
		})
	}
	v.mu.RUnlock()
	if subject != "" {
		targets, _ = s.routeTargets(subject)
	} else {
		targets = s.realtimeMasters()
	}
	// Ask for every subject: a group's retry subject (%RETRY%<subject>%<group>)
	// is a subject of its own on the broker, folded into the group's row.
	body := protocol.AppendBrokerStatsRequest(nil, &protocol.BrokerStatsRequest{})
	var failures []api.BrokerFailure
	for _, r := range s.relay(ctx, targets, protocol.CmdBrokerStats, body) {
		if r.err != nil {
			failures = append(failures, api.BrokerFailure{BrokerGroup: r.group, Error: r.err.Error()})
			continue
		}
		st, err := protocol.DecodeBrokerStatsResponse(r.body)
		if err != nil {
			failures = append(failures, api.BrokerFailure{BrokerGroup: r.group, Error: err.Error()})
			continue
		}
		for _, ss := range st.Subjects {
			kind, real, retryGroup, system := protocol.ParseSystemSubject(ss.Subject)
			switch {
			case system && kind == protocol.KindDead:
				// A dead subject's letters come as its group's backlog
				// there (realtime/deadcount.go).
				for _, gs := range ss.Groups {
					if gs.Group == retryGroup && (subject == "" || real == subject) {
						get(cgKey{real, gs.Group}).DeadLetters += gs.Backlog
					}
				}
				continue
			case system && kind != protocol.KindRetry:
				continue
			case !system:
				real = ss.Subject
			}
			if subject != "" && real != subject {
				continue
			}
			if totals != nil && !system {
				totals.messages += ss.Messages
				totals.inPerSec += uint64(ss.InPerSec)
			}
			for _, gs := range ss.Groups {
				if system {
					if gs.Group == retryGroup {
						get(cgKey{real, gs.Group}).RetryBacklog += gs.Backlog
					}
					continue
				}
				cg := get(cgKey{real, gs.Group})
				addConsumerStats(cg, gs.Consumers)
				cg.Backlog += gs.Backlog
				cg.OutPerSec += uint64(gs.OutPerSec)
				cg.PerBroker = append(cg.PerBroker, api.GroupBacklog{BrokerGroup: r.group, Messages: ss.Messages, Cursor: gs.Cursor, Backlog: gs.Backlog,
					OutPerSec: uint64(gs.OutPerSec)})
			}
		}
	}
	if totals != nil {
		totals.failures = failures
	}
	out := make([]api.ConsumerGroup, 0, len(groups))
	for _, g := range groups {
		sort.Slice(g.Consumers, func(i, j int) bool { return g.Consumers[i].ClientID < g.Consumers[j].ClientID })
		sort.Slice(g.PerBroker, func(i, j int) bool { return g.PerBroker[i].BrokerGroup < g.PerBroker[j].BrokerGroup })
		g.Errors = failures
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Subject != out[j].Subject {
			return out[i].Subject < out[j].Subject
		}
		return out[i].Group < out[j].Group
	})
	return out, nil
}

// addConsumerStats adds one broker's view of a group's consumers to cg:
// un-acked messages add up, the last pull is the latest; a consumer only a
// broker knows (it has not registered with this meta server) is listed too.
func addConsumerStats(cg *api.ConsumerGroup, stats []protocol.ConsumerStats) {
	for _, cs := range stats {
		i := slices.IndexFunc(cg.Consumers, func(c api.Consumer) bool { return c.ClientID == cs.Consumer })
		if i < 0 {
			cg.Consumers = append(cg.Consumers, api.Consumer{Subject: cg.Subject, Group: cg.Group, ClientID: cs.Consumer,
				ClientType: protocol.ClientConsumer.String(), Online: cs.Flags&protocol.ConsumerOffline == 0})
			i = len(cg.Consumers) - 1
		}
		c := &cg.Consumers[i]
		c.Unacked += cs.Unacked
		if !cs.LastSeen.IsZero() && (c.LastPull == nil || cs.LastSeen.After(*c.LastPull)) {
			at := cs.LastSeen.UTC()
			c.LastPull = &at
		}
	}
}

// deadLetters relays a CmdDeadLetters to the masters of subject's route and
// merges the answers.
func (s *Server) deadLetters(ctx context.Context, req protocol.DeadLettersRequest) (api.DeadLetters, error) {
	out := api.DeadLetters{Subject: req.Subject, Group: req.Group, Letters: []api.DeadLetter{}}
	targets, ok := s.routeTargets(req.Subject)
	if !ok {
		return out, protocol.Errorf(protocol.StatusNotFound, "subject "+req.Subject+" has no route")
	}
	results := s.relay(ctx, targets, protocol.CmdDeadLetters, protocol.AppendDeadLettersRequest(nil, &req))
	okCount := 0
	for _, r := range results {
		var resp protocol.DeadLettersResponse
		err := r.err
		if err == nil {
			resp, err = protocol.DecodeDeadLettersResponse(r.body)
		}
		if err != nil {
			out.Errors = append(out.Errors, api.BrokerFailure{BrokerGroup: r.group, Error: err.Error()})
			continue
		}
		okCount++
		out.Total += resp.Total
		out.Affected += resp.Affected
		for _, l := range resp.Letters {
			out.Letters = append(out.Letters, decodeDeadLetter(r.group, l))
		}
	}
	if okCount == 0 && len(out.Errors) > 0 {
		return out, fmt.Errorf("%w: %s: %s", errAllFailed, out.Errors[0].BrokerGroup, out.Errors[0].Error)
	}
	return out, nil
}

// decodeDeadLetter turns a stored dead letter into its JSON form; a body
// that is not UTF-8 text is sent as base64.
func decodeDeadLetter(group string, l protocol.DeadLetter) api.DeadLetter {
	d := api.DeadLetter{BrokerGroup: group, Seq: l.Seq, Size: len(l.Message)}
	m, err := protocol.DecodeMessage(l.Message)
	if err != nil {
		d.Error = err.Error()
		return d
	}
	d.ID, d.Subject, d.Tags, d.Attempts, d.CreatedAt = m.ID, m.Subject, m.Tags, m.Attempts, m.Created
	if f, ok := protocol.FailureOf(m.Properties); ok {
		d.LastError, d.DeadWhy = f.Error, f.DeadWhy
		if !f.FailedAt.IsZero() {
			at := f.FailedAt.UTC()
			d.FailedAt = &at
		}
	}
	if len(m.Properties) > 0 {
		d.Properties = make(map[string]string, len(m.Properties))
		for _, p := range m.Properties {
			d.Properties[p.Key] = p.Value
		}
	}
	if utf8.Valid(m.Body) {
		d.Body = string(m.Body)
	} else {
		d.Body, d.BodyBase64 = base64.StdEncoding.EncodeToString(m.Body), true
	}
	return d
}

// consumerGroupKnown reports whether subject's consumer group exists: a
// consumer of it is registered or marked offline, or a master on the
// subject's route reports a position (or a retry backlog) for it. When no
// master answered it reports true, so that the request's own relay reports
// the failure; failed lists the masters that did not answer.
func (s *Server) consumerGroupKnown(ctx context.Context, subject, group string) (known bool, failed []string) {
	v := s.view
	v.mu.RLock()
	for ck := range v.consumers {
		if ck.subject == subject && ck.group == group {
			known = true
		}
	}
	for ck := range v.offline {
		if ck.subject == subject && ck.group == group {
			known = true
		}
	}
	v.mu.RUnlock()
	if known {
		return true, nil
	}
	targets, _ := s.routeTargets(subject)
	body := protocol.AppendBrokerStatsRequest(nil, &protocol.BrokerStatsRequest{})
	answered := 0
	retry := protocol.RetrySubject(subject, group)
	for _, r := range s.relay(ctx, targets, protocol.CmdBrokerStats, body) {
		var st protocol.BrokerStatsResponse
		err := r.err
		if err == nil {
			st, err = protocol.DecodeBrokerStatsResponse(r.body)
		}
		if err != nil {
			failed = append(failed, r.group)
			continue
		}
		answered++
		for _, ss := range st.Subjects {
			if ss.Subject != subject && ss.Subject != retry {
				continue
			}
			for _, gs := range ss.Groups {
				if gs.Group == group {
					return true, nil
				}
			}
		}
	}
	return answered == 0, failed
}

// errUnknownConsumerGroup is the 404 for a consumer group nobody knows.
func errUnknownConsumerGroup(subject, group string, failed []string, hint string) error {
	msg := fmt.Sprintf("consumer group %q of subject %q does not exist (no consumer of it is registered and no broker group on the route has it)", group, subject)
	if len(failed) > 0 {
		msg += fmt.Sprintf("; broker groups %v did not answer", failed)
	}
	return protocol.Errorf(protocol.StatusNotFound, msg+hint)
}

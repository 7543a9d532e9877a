package metaserver

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/qmq-go/qmq/metaserver/api"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// Lookup and trace (GET /messages, GET /trace): CmdFindMessages relayed to
// the master of every realtime group (a message's subject is not known
// beforehand, and retry and dead-letter copies live on other routes), and,
// with subject=, to the masters of the subject's delay route (a delay
// server indexes by subject: by id, or by schedule key for a key lookup),
// the answers merged. A trace is read from the copies the brokers keep anyway:
// the original (sent, stored), each retry copy (attempt, the handler's
// error, next due), each dead letter (why, when) and each re-driven copy,
// and for the original and every retry copy where it stands in each
// consumer group (waiting, pulled by a consumer, acked: store.Deliveries).
// Bodies are shown only to identities with the read bodies right; nothing
// found is 404 not found.

func (s *Server) getMessages(r *http.Request) (any, error) {
	q := r.URL.Query()
	id, key := q.Get("id"), q.Get("key")
	if (id == "") == (key == "") {
		return nil, fmt.Errorf("%w: give one of id= and key=", errBadInput)
	}
	l, err := s.findMessages(r.Context(), id, key, q.Get("subject"))
	if err != nil {
		return nil, err
	}
	if p := principalOf(r.Context()); p == nil || !p.CanReadBodies() {
		for i := range l.Messages {
			l.Messages[i].Body, l.Messages[i].BodyBase64, l.Messages[i].BodyHidden = "", false, true
		}
	}
	return l, nil
}

func (s *Server) getTrace(r *http.Request) (any, error) {
	q := r.URL.Query()
	id, key := q.Get("id"), q.Get("key")
	if (id == "") == (key == "") {
		return nil, fmt.Errorf("%w: give one of id= and key=", errBadInput)
	}
	l, err := s.findMessages(r.Context(), id, key, q.Get("subject"))
	if err != nil {
		return nil, err
	}
	traces := traces(l)
	if id != "" {
		return traces[0], nil
	}
	return traces, nil
}

// findMessages relays CmdFindMessages to every realtime master and to the
// delay masters: those of the subject's delay route when subject is given,
// every one for a lookup by id without a subject (a delay server's id index
// spans subjects; a schedule key is found only within its subject).
func (s *Server) findMessages(ctx context.Context, id, key, subject string) (api.Lookup, error) {
	req := protocol.FindMessagesRequest{By: protocol.FindByID, Value: id, Subject: subject}
	if key != "" {
		req = protocol.FindMessagesRequest{By: protocol.FindByKey, Value: key, Subject: subject}
	}
	targets := s.realtimeMasters()
	if subject != "" {
		if err := s.limits.CheckSubject(subject); err != nil {
			return api.Lookup{}, err
		}
		targets = append(targets, s.delayRouteMasters(subject)...)
	} else if key == "" {
		targets = append(targets, s.delayMasters()...)
	}
	out := api.Lookup{ID: id, Key: key, Messages: []api.StoredMessage{}}
	for _, r := range s.relay(ctx, targets, protocol.CmdFindMessages, protocol.AppendFindMessagesRequest(nil, &req)) {
		var resp protocol.FindMessagesResponse
		err := r.err
		if err == nil {
			resp, err = protocol.DecodeFindMessagesResponse(r.body)
		}
		if err != nil {
			out.Errors = append(out.Errors, api.BrokerFailure{BrokerGroup: r.group, Error: err.Error()})
			continue
		}
		for _, m := range resp.Messages {
			out.Messages = append(out.Messages, storedMessage(r.group, m))
		}
	}
	sort.SliceStable(out.Messages, func(i, j int) bool { return out.Messages[i].StoredAt.Before(out.Messages[j].StoredAt) })
	if len(out.Messages) == 0 {
		what := "id " + id
		if key != "" {
			what = "key " + key
		}
		if len(out.Errors) > 0 {
			return out, fmt.Errorf("%w: no message with %s found; %s: %s", errAllFailed, what, out.Errors[0].BrokerGroup, out.Errors[0].Error)
		}
		return out, protocol.Errorf(protocol.StatusNotFound, "not found: no message with "+what)
	}
	return out, nil
}

// storedMessage decodes a found copy into its JSON form.
func storedMessage(group string, f protocol.FoundMessage) api.StoredMessage {
	sm := api.StoredMessage{BrokerGroup: group, Offset: f.Offset, Seq: f.Seq, StoredAt: time.UnixMilli(f.Stored).UTC(),
		Size: len(f.Message), BodyHidden: f.Flags&protocol.FoundBodyHidden != 0, Kind: "message"}
	if f.Flags&protocol.FoundScheduled != 0 {
		sm.Kind, sm.ScheduleState = "scheduled", "pending"
		switch {
		case f.Flags&protocol.FoundCancelled != 0:
			sm.ScheduleState = "cancelled"
		case f.Flags&protocol.FoundFired != 0:
			sm.ScheduleState = "fired"
		}
	}
	m, err := protocol.DecodeMessage(f.Message)
	if err != nil {
		sm.LastError = "cannot decode the stored copy: " + err.Error()
		return sm
	}
	sm.ID, sm.StoredSubject, sm.Subject, sm.Tags, sm.Attempts, sm.CreatedAt = m.ID, m.Subject, m.Subject, m.Tags, m.Attempts, m.Created.UTC()
	if sm.Kind == "scheduled" {
		sm.StoredAt = sm.CreatedAt // a delay server keeps no store time; Stored is the due time
	}
	if kind, real, cg, ok := protocol.ParseSystemSubject(m.Subject); ok {
		sm.Subject, sm.Group = real, cg
		sm.Kind = map[string]string{protocol.KindRetry: "retry", protocol.KindDead: "dead"}[kind]
	}
	if !m.DeliverAt.IsZero() {
		at := m.DeliverAt.UTC()
		sm.DeliverAt = &at
	}
	if fl, ok := protocol.FailureOf(m.Properties); ok {
		sm.LastError, sm.DeadWhy = fl.Error, fl.DeadWhy
		if !fl.FailedAt.IsZero() {
			at := fl.FailedAt.UTC()
			sm.FailedAt = &at
		}
	}
	if len(m.Properties) > 0 {
		sm.Properties = make(map[string]string, len(m.Properties))
		for _, p := range m.Properties {
			sm.Properties[p.Key] = p.Value
		}
	}
	for _, d := range f.Deliveries {
		ad := api.Delivery{Group: d.Group, State: d.State.String(), Consumer: d.Consumer, PullSeq: d.PullSeq}
		if d.LastSeen > 0 {
			at := time.UnixMilli(d.LastSeen).UTC()
			ad.LastSeen = &at
		}
		sm.Deliveries = append(sm.Deliveries, ad)
	}
	if !sm.BodyHidden {
		if utf8.Valid(m.Body) {
			sm.Body = string(m.Body)
		} else {
			sm.Body, sm.BodyBase64 = base64.StdEncoding.EncodeToString(m.Body), true
		}
	}
	return sm
}

// traces builds one trace per message id of a lookup, in the order the
// ids were first stored.
func traces(l api.Lookup) []api.Trace {
	var order []string
	byID := map[string][]api.StoredMessage{}
	for _, m := range l.Messages {
		if _, ok := byID[m.ID]; !ok {
			order = append(order, m.ID)
		}
		byID[m.ID] = append(byID[m.ID], m)
	}
	out := make([]api.Trace, 0, len(order))
	for _, id := range order {
		out = append(out, traceOf(id, byID[id], l.Errors))
	}
	return out
}

// traceOf reads a message's life from its stored copies (oldest first).
func traceOf(id string, copies []api.StoredMessage, errs []api.BrokerFailure) api.Trace {
	t := api.Trace{ID: id, Events: []api.TraceEvent{}, Errors: errs}
	deadSeen := map[string]bool{} // consumer groups whose last copy was a dead letter
	forwarded := slices.ContainsFunc(copies, func(c api.StoredMessage) bool { return c.Kind == "message" })
	for _, c := range copies {
		t.Subject = c.Subject
		failedAt := c.StoredAt
		if c.FailedAt != nil {
			failedAt = *c.FailedAt
		}
		switch c.Kind {
		case "message":
			t.Events = append(t.Events,
				api.TraceEvent{At: c.CreatedAt, Event: "sent", Detail: "created by the producer"},
				api.TraceEvent{At: c.StoredAt, Event: "stored", BrokerGroup: c.BrokerGroup,
					Detail: fmt.Sprintf("%s seq %d, offset %d", c.StoredSubject, c.Seq, c.Offset)})
			t.Events = append(t.Events, deliveryEvents(c)...)
		case "retry":
			if deadSeen[c.Group] && c.Attempts == 0 {
				deadSeen[c.Group] = false
				t.Events = append(t.Events, api.TraceEvent{At: c.StoredAt, Event: "redriven", Group: c.Group, BrokerGroup: c.BrokerGroup,
					Detail: "re-driven from dead letters with a fresh attempt count"})
				t.Events = append(t.Events, deliveryEvents(c)...)
				continue
			}
			t.Events = append(t.Events, api.TraceEvent{At: failedAt, Event: "retried", Group: c.Group, BrokerGroup: c.BrokerGroup,
				Attempt: int(c.Attempts), Error: c.LastError, NextDue: c.DeliverAt})
			t.Events = append(t.Events, deliveryEvents(c)...)
		case "scheduled":
			if !forwarded {
				t.Events = append(t.Events, api.TraceEvent{At: c.CreatedAt, Event: "sent", Detail: "created by the producer"})
			}
			due := "-"
			if c.DeliverAt != nil {
				due = c.DeliverAt.Format(time.RFC3339Nano)
			}
			t.Events = append(t.Events, api.TraceEvent{At: c.CreatedAt, Event: "scheduled", BrokerGroup: c.BrokerGroup, NextDue: c.DeliverAt,
				Detail: fmt.Sprintf("due %s: %s (hour file %d, offset %d)", due, c.ScheduleState, c.Seq, c.Offset)})
			if c.ScheduleState == "fired" && c.DeliverAt != nil {
				t.Events = append(t.Events, api.TraceEvent{At: *c.DeliverAt, Event: "fired", BrokerGroup: c.BrokerGroup,
					Detail: "forwarded to a realtime group"})
			}
		case "dead":
			deadSeen[c.Group] = true
			t.Events = append(t.Events, api.TraceEvent{At: failedAt, Event: "dead", Group: c.Group, BrokerGroup: c.BrokerGroup,
				Attempt: int(c.Attempts), Error: c.LastError, Detail: c.DeadWhy})
		}
	}
	sort.SliceStable(t.Events, func(i, j int) bool { return t.Events[i].At.Before(t.Events[j].At) })
	return t
}

// deliveryEvents are the events of a copy's deliveries, at the copy's time
// (or its due time when later).
func deliveryEvents(c api.StoredMessage) []api.TraceEvent {
	at := c.StoredAt
	if c.DeliverAt != nil && c.DeliverAt.After(at) {
		at = *c.DeliverAt
	}
	var out []api.TraceEvent
	for _, d := range c.Deliveries {
		e := api.TraceEvent{At: at, Group: d.Group, BrokerGroup: c.BrokerGroup, Attempt: int(c.Attempts) + 1}
		switch d.State {
		case protocol.DeliveryUnacked.String():
			e.Event, e.Consumer = "pulled", d.Consumer
			e.Detail = fmt.Sprintf("by %s, not acked yet (pull seq %d)", d.Consumer, d.PullSeq)
		case protocol.DeliveryDone.String():
			e.Event, e.Detail = "acked", "taken by the group and acked (or skipped by its tag filter)"
		default:
			e.Event, e.Detail = "waiting", "not pulled by the group yet"
		}
		out = append(out, e)
	}
	return out
}

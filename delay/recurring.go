package delay

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"go.uber.org/zap"

	"github.com/qmq-go/qmq/delay/store"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/producer"
)

// Recurring schedules. A schedule is stored as one keyed delayed message,
// its template: the schedule's name is its schedule key, its subject, tags,
// body and properties are those of every occurrence, its due time is the
// next occurrence, and protocol.PropCronSpec (a cron expression of five
// fields or a descriptor such as "@every 1m", robfig/cron/v3 syntax) with
// PropCronZone, PropCronUntil and PropCronMissed say when it recurs.
//
// When the template falls due the forwarder sends the occurrence — a copy
// of the template without the cron properties, id "<template id>.<due ms>",
// PropCronOccurrence the due time — like any due message, and once a
// realtime broker has stored it appends the template again, due at the next
// occurrence (same id, same key), and only then marks the fired template
// dispatched. So the schedule lives in the delay group's hour files and is
// replicated with them; after a crash or a failover the template may fire
// again, and then its occurrence has the same id (the realtime broker drops
// it within its dedupe window) and the next template is a duplicate of the
// one stored (same key and id: StatusDuplicate), so no occurrence is sent
// twice and none is lost. Never early: an occurrence is sent when its
// template falls due, never before. Deleting a schedule is cancelling its
// template by key; rescheduling the template moves its next occurrence.
//
// Occurrences missed while no delay server could fire them (the template
// fires more than a tick late past a further occurrence) follow
// PropCronMissed: "once" (default) sends one occurrence for the missed
// time, late, "skip" sends none; either way the next occurrence is the
// first one after now.

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// CronSchedule is a template's recurrence.
type CronSchedule struct {
	Spec  cron.Schedule
	Zone  *time.Location
	Until int64 // Unix ms; 0: no end
	Skip  bool  // missed occurrences are skipped
}

// ParseCron reads the recurrence of a template; ok false means the message
// is no template. Bad values are protocol.ErrInvalid with the reason.
func ParseCron(v *protocol.View) (cs CronSchedule, ok bool, err error) {
	var spec, zone, until, missed string
	v.Properties(func(k, val []byte) bool {
		switch string(k) {
		case protocol.PropCronSpec:
			spec, ok = string(val), true
		case protocol.PropCronZone:
			zone = string(val)
		case protocol.PropCronUntil:
			until = string(val)
		case protocol.PropCronMissed:
			missed = string(val)
		}
		return true
	})
	if !ok {
		return cs, false, nil
	}
	bad := func(f string, a ...any) error { return protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf(f, a...)) }
	if _, has := keyOf(v); !has {
		return cs, true, bad("a recurring schedule needs a name (its schedule key)")
	}
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		return cs, true, bad("cron expression %q: give the time zone in %s", spec, protocol.PropCronZone)
	}
	cs.Zone = time.UTC
	if zone != "" {
		if cs.Zone, err = time.LoadLocation(zone); err != nil {
			return cs, true, bad("time zone %q: %v", zone, err)
		}
		spec = "CRON_TZ=" + zone + " " + spec
	}
	if cs.Spec, err = cronParser.Parse(spec); err != nil {
		return cs, true, bad("cron expression %q: %v", spec, err)
	}
	if until != "" {
		if cs.Until, err = strconv.ParseInt(until, 10, 64); err != nil {
			return cs, true, bad("%s %q: Unix milliseconds", protocol.PropCronUntil, until)
		}
	}
	switch missed {
	case "", "once":
	case "skip":
		cs.Skip = true
	default:
		return cs, true, bad("%s %q: once or skip", protocol.PropCronMissed, missed)
	}
	return cs, true, nil
}

func keyOf(v *protocol.View) ([]byte, bool) {
	var key []byte
	found := false
	v.Properties(func(k, val []byte) bool {
		if string(k) == protocol.PropScheduleKey {
			key, found = val, true
			return false
		}
		return true
	})
	return key, found
}

// Next returns the first occurrence strictly after t (Unix ms), or false
// when the schedule has ended. A local time that happens twice (the hour
// a DST change repeats) is one occurrence, at its first instant; one that
// does not happen that day is skipped (robfig/cron's rule). "@every"
// counts elapsed time.
func (cs CronSchedule) Next(t int64) (int64, bool) {
	prev := time.UnixMilli(t)
	n := cs.Spec.Next(prev)
	const wall = "2006-01-02 15:04:05.000"
	_, every := cs.Spec.(cron.ConstantDelaySchedule) // @every: elapsed time, not wall clock
	if !n.IsZero() && !every && cs.Zone != nil && n.Sub(prev) <= 2*time.Hour && n.In(cs.Zone).Format(wall) == prev.In(cs.Zone).Format(wall) {
		n = cs.Spec.Next(n) // the repeated wall-clock time: fired already
	}
	if n.IsZero() || cs.Until != 0 && n.UnixMilli() > cs.Until {
		return 0, false
	}
	return n.UnixMilli(), true
}

// recurrence is what the forwarder does with a fired template.
type recurrence struct {
	occurrence []byte // the occurrence to forward; nil: skipped
	next       []byte // the template again, due at the next occurrence; nil: the schedule ended
}

// recur builds the occurrence of a template due at due (fired at now) and
// the next template.
func recur(tmpl []byte, due, now int64, limits protocol.Limits) (recurrence, error) {
	v, err := protocol.ParseMessageNoCRC(tmpl)
	if err != nil {
		return recurrence{}, err
	}
	cs, _, err := ParseCron(&v)
	if err != nil {
		return recurrence{}, err
	}
	m := v.Message()
	var r recurrence
	// Missed occurrences: a further one fell due before now.
	missed := false
	if n, ok := cs.Next(due); ok && n <= now {
		missed = true
	}
	if !missed || !cs.Skip {
		occ := *m
		occ.ID = m.ID + "." + strconv.FormatInt(due, 10)
		occ.DeliverAt = time.UnixMilli(due)
		occ.Created = time.UnixMilli(now)
		occ.Properties = nil
		for _, p := range m.Properties {
			switch p.Key {
			case protocol.PropCronSpec, protocol.PropCronZone, protocol.PropCronUntil, protocol.PropCronMissed, protocol.PropScheduleKey:
				continue
			}
			occ.Properties = append(occ.Properties, p)
		}
		occ.Properties = append(occ.Properties, protocol.Property{Key: protocol.PropCronOccurrence, Value: strconv.FormatInt(due, 10)})
		if r.occurrence, err = protocol.AppendMessage(nil, &occ, limits); err != nil {
			return recurrence{}, err
		}
	}
	after := due
	if missed {
		after = now
	}
	if n, ok := cs.Next(after); ok {
		next := *m
		next.DeliverAt = time.UnixMilli(n)
		if r.next, err = protocol.AppendMessage(nil, &next, limits); err != nil {
			return recurrence{}, err
		}
	}
	return r, nil
}

// isTemplate reports whether a due message is a recurring schedule's
// template.
func isTemplate(msg []byte) bool {
	v, err := protocol.ParseMessageNoCRC(msg)
	if err != nil {
		return false
	}
	found := false
	v.Properties(func(k, _ []byte) bool {
		found = string(k) == protocol.PropCronSpec
		return !found
	})
	return found
}

// recur handles a fired template: forwards its occurrence (retrying as
// send does), then stores the next template, then marks the fired one.
func (m *master) recur(d store.Due, now time.Time) {
	r, err := recur(d.Message, d.DueMillis, now.UnixMilli(), m.s.limits)
	if err != nil {
		// Cannot happen: templates are checked on the way in.
		m.lg.Error("cannot build a recurring schedule's occurrence; the schedule ends", zap.Stringer("ref", d.Ref), zap.Error(err))
		m.marks <- d.Ref
		return
	}
	if r.occurrence == nil {
		m.s.metrics.cronSkipped.Inc()
		m.storeNext(d, r.next)
		return
	}
	m.forwardOccurrence(d, r)
}

func (m *master) forwardOccurrence(d store.Due, r recurrence) {
	err := m.forward.SendEncoded(r.occurrence, func(err error) {
		if err == nil {
			m.s.metrics.forwarded.Inc()
			m.s.metrics.cronOccurrences.Inc()
			m.storeNext(d, r.next)
			return
		}
		m.s.metrics.forwardErrors.Inc()
		m.lg.Warn("forwarding an occurrence failed, retrying", zap.Stringer("ref", d.Ref), zap.Error(err))
		if !m.closing.Load() {
			m.retries.Add(1)
			time.AfterFunc(time.Second, func() { defer m.retries.Done(); m.forwardOccurrence(d, r) })
		}
	})
	if err != nil && !errors.Is(err, producer.ErrClosed) {
		m.lg.Error("cannot forward an occurrence; the schedule ends", zap.Stringer("ref", d.Ref), zap.Error(err))
		m.marks <- d.Ref
	}
}

// storeNext appends the next template (none: the schedule ended) and then
// marks the fired one dispatched. The same template stored already (a
// template fired again after a crash or failover) is a duplicate; another
// message holding the schedule's name ends this chain.
func (m *master) storeNext(d store.Due, next []byte) {
	if next == nil {
		m.marks <- d.Ref
		return
	}
	m.store.Append([][]byte{next}, func(rs []store.Result) {
		err := rs[0].Err
		switch {
		case err == nil, errors.Is(err, protocol.ErrDuplicate), errors.Is(err, protocol.ErrKeyExists):
			m.marks <- d.Ref
		case m.closing.Load():
			// Unmarked: the template fires again after the restart.
		default:
			m.lg.Warn("storing a recurring schedule's next occurrence failed, retrying", zap.Stringer("ref", d.Ref), zap.Error(err))
			m.retries.Add(1)
			time.AfterFunc(time.Second, func() { defer m.retries.Done(); m.storeNext(d, next) })
		}
	})
}

package delay

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
// realtime broker has stored it recurLoop appends the template again, due
// at the next occurrence (same id, same key), and only then marks the fired
// template dispatched. So the schedule lives in the delay group's hour files and is
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
// Recurrences are parsed once per distinct property text (cronCache): every
// occurrence of every schedule reads its template here twice (the forwarder,
// and the store's check of the next template), and a parse with a time zone
// reads the zone's file.
func ParseCron(v *protocol.View) (cs CronSchedule, ok bool, err error) {
	var spec, zone, until, missed []byte
	named := false
	v.Properties(func(k, val []byte) bool {
		switch string(k) {
		case protocol.PropCronSpec:
			spec, ok = val, true
		case protocol.PropCronZone:
			zone = val
		case protocol.PropCronUntil:
			until = val
		case protocol.PropCronMissed:
			missed = val
		case protocol.PropScheduleKey:
			named = true
		}
		return true
	})
	if !ok {
		return cs, false, nil
	}
	if !named {
		return cs, true, protocol.Errorf(protocol.StatusInvalid, "a recurring schedule needs a name (its schedule key)")
	}
	key := make([]byte, 0, len(spec)+len(zone)+len(until)+len(missed)+3)
	key = append(append(append(append(append(append(append(key, spec...), 0), zone...), 0), until...), 0), missed...)
	if e, hit := cronCache.Load(string(key)); hit {
		c := e.(cronEntry)
		return c.cs, true, c.err
	}
	cs, err = parseCron(string(spec), string(zone), string(until), string(missed))
	if cronCacheSize.Add(1) <= cronCacheMax {
		cronCache.Store(string(key), cronEntry{cs: cs, err: err})
	}
	return cs, true, err
}

// cronCache maps a recurrence's property text (spec, zone, until, missed,
// NUL-separated) to its parse; it keeps the first cronCacheMax distinct ones.
var (
	cronCache     sync.Map
	cronCacheSize atomic.Int64
)

const cronCacheMax = 4096

type cronEntry struct {
	cs  CronSchedule
	err error
}

func parseCron(spec, zone, until, missed string) (cs CronSchedule, err error) {
	bad := func(f string, a ...any) error { return protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf(f, a...)) }
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		return cs, bad("cron expression %q: give the time zone in %s", spec, protocol.PropCronZone)
	}
	cs.Zone = time.UTC
	if zone != "" {
		if cs.Zone, err = time.LoadLocation(zone); err != nil {
			return cs, bad("time zone %q: %v", zone, err)
		}
		spec = "CRON_TZ=" + zone + " " + spec
	}
	if cs.Spec, err = cronParser.Parse(spec); err != nil {
		return cs, bad("cron expression %q: %v", spec, err)
	}
	if until != "" {
		if cs.Until, err = strconv.ParseInt(until, 10, 64); err != nil {
			return cs, bad("%s %q: Unix milliseconds", protocol.PropCronUntil, until)
		}
	}
	switch missed {
	case "", "once":
	case "skip":
		cs.Skip = true
	default:
		return cs, bad("%s %q: once or skip", protocol.PropCronMissed, missed)
	}
	return cs, nil
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

// firing is what the forwarder does with a fired template: forward occ
// (nil: a missed occurrence skipped), then have the template stored again
// due at next (none when the schedule has ended).
type firing struct {
	occ     *builtOccurrence
	next    int64
	hasNext bool
	cs      CronSchedule
}

// plan decides what a template v due at due (Unix ms), fired at now, does:
// its occurrence is taken from built when built ahead, else built now.
func plan(v *protocol.View, due, now int64, limits protocol.Limits, built *occurrences) (firing, error) {
	b := built.take(v, due)
	if b == nil {
		cs, _, err := ParseCron(v)
		if err != nil {
			return firing{}, err
		}
		occ, err := occurrenceOf(v, due, limits)
		if err != nil {
			return firing{}, err
		}
		b = &builtOccurrence{due: due, msg: occ, subject: string(v.Subject), id: occurrenceID(v.ID, due), cs: cs}
		b.after, b.afterOK = cs.Next(due)
	}
	f := firing{occ: b, next: b.after, hasNext: b.afterOK, cs: b.cs}
	if b.afterOK && b.after <= now {
		// Missed occurrences: a further one fell due before now. The next
		// one is the first after now; this one is sent late, or skipped.
		f.next, f.hasNext = b.cs.Next(now)
		if b.cs.Skip {
			f.occ = nil
		}
	}
	return f, nil
}

// recurrence is a fired template's occurrence and next template, in bytes.
type recurrence struct {
	occurrence []byte // nil: skipped
	next       []byte // nil: the schedule ended
}

// recur builds the occurrence of a template due at due (fired at now) and
// the next template, as the forwarder and recurLoop do.
func recur(tmpl []byte, due, now int64, limits protocol.Limits) (recurrence, error) {
	return recurFrom(tmpl, due, now, limits, nil)
}

// recurFrom is recur taking the occurrence from built when it holds it.
func recurFrom(tmpl []byte, due, now int64, limits protocol.Limits, built *occurrences) (recurrence, error) {
	v, err := protocol.ParseMessageNoCRC(tmpl)
	if err != nil {
		return recurrence{}, err
	}
	f, err := plan(&v, due, now, limits, built)
	if err != nil {
		return recurrence{}, err
	}
	var r recurrence
	if f.occ != nil {
		r.occurrence = f.occ.msg
	}
	if f.hasNext {
		r.next = withDue(tmpl, f.next)
	}
	return r, nil
}

// occurrenceID is "<template id>.<due ms>".
func occurrenceID(tmplID []byte, due int64) string {
	var b [256 + 24]byte // an id is at most 255 bytes
	return string(strconv.AppendInt(append(append(b[:0], tmplID...), '.'), due, 10))
}

// occurrenceOf builds the occurrence of template v due at due: a copy
// without the cron properties and the schedule key, id "<template
// id>.<due ms>", created at due, PropCronOccurrence the due time (the last
// property). The same template and time always give the same bytes.
func occurrenceOf(v *protocol.View, due int64, limits protocol.Limits) ([]byte, error) {
	at := strconv.FormatInt(due, 10)
	occ := protocol.Message{Subject: string(v.Subject), ID: string(v.ID) + "." + at, Body: v.Body, // AppendMessage copies it
		Created: time.UnixMilli(due), DeliverAt: time.UnixMilli(due), Attempts: v.Attempts}
	if v.TagCount() > 0 {
		occ.Tags = make([]string, 0, v.TagCount())
		v.Tags(func(t []byte) bool { occ.Tags = append(occ.Tags, string(t)); return true })
	}
	occ.Properties = make([]protocol.Property, 0, v.PropertyCount())
	v.Properties(func(k, val []byte) bool {
		switch string(k) {
		case protocol.PropCronSpec, protocol.PropCronZone, protocol.PropCronUntil, protocol.PropCronMissed, protocol.PropScheduleKey:
		default:
			occ.Properties = append(occ.Properties, protocol.Property{Key: string(k), Value: string(val)})
		}
		return true
	})
	occ.Properties = append(occ.Properties, protocol.Property{Key: protocol.PropCronOccurrence, Value: at})
	return protocol.AppendMessage(make([]byte, 0, occ.EncodedSize()), &occ, limits)
}

// occurrenceAt returns the occurrence of the same template as occ (due at
// due) due at at instead: occ with its times, the time in its id and its
// PropCronOccurrence patched, when both times have as many digits (they
// have until the year 2286) — the bytes occurrenceOf would build, for a
// copy and a checksum. nil when occ is not laid out as occurrenceOf lays it.
func occurrenceAt(occ []byte, due, at int64) []byte {
	var db, ab [20]byte
	d, a := strconv.AppendInt(db[:0], due, 10), strconv.AppendInt(ab[:0], at, 10)
	if len(d) != len(a) {
		return nil
	}
	v, err := protocol.ParseMessageNoCRC(occ)
	if err != nil || v.CreatedMillis != due || v.DeliverAtMillis != due || !bytes.HasSuffix(v.ID, d) {
		return nil
	}
	var lastKey, lastVal []byte
	v.Properties(func(k, val []byte) bool { lastKey, lastVal = k, val; return true })
	if string(lastKey) != protocol.PropCronOccurrence || !bytes.Equal(lastVal, d) {
		return nil
	}
	idEnd := 24 + 1 + len(v.Subject) + 1 + len(v.ID) // the layout: pkg/protocol message.go
	valEnd := len(occ) - len(v.Body) - 4             // the last property's value ends at the body's length
	b := append([]byte(nil), occ...)
	binary.BigEndian.PutUint64(b[8:16], uint64(at))
	binary.BigEndian.PutUint64(b[16:24], uint64(at))
	copy(b[idEnd-len(a):idEnd], a)
	copy(b[valEnd-len(a):valEnd], a)
	binary.BigEndian.PutUint32(b[0:4], protocol.Checksum(b[4:]))
	return b
}

// withDue returns a copy of msg due at due (Unix ms): the template of the
// next occurrence differs from the fired one in its due time alone (same
// id, key, created time and properties).
func withDue(msg []byte, due int64) []byte {
	b := append([]byte(nil), msg...)
	binary.BigEndian.PutUint64(b[16:24], uint64(due))
	binary.BigEndian.PutUint32(b[0:4], protocol.Checksum(b[4:]))
	return b
}

// recur handles a fired template: forwards its occurrence (retrying as
// send does), then has the next template stored, then the fired one
// marked. Only what the occurrence's send needs is done here, while a
// second's templates fire together: the next template is made by
// recurLoop.
func (m *master) recur(d store.Due, v *protocol.View, now time.Time) {
	f, err := plan(v, d.DueMillis, now.UnixMilli(), m.s.limits, m.built)
	if err != nil {
		// Cannot happen: templates are checked on the way in.
		m.lg.Error("cannot build a recurring schedule's occurrence; the schedule ends", zap.Stringer("ref", d.Ref), zap.Error(err))
		m.marks <- d.Ref
		return
	}
	next := &nextTemplate{ref: d.Ref, tmpl: d.Message, due: f.next, cs: f.cs}
	if !f.hasNext {
		next.tmpl = nil
	}
	if f.occ == nil {
		m.s.metrics.cronSkipped.Inc()
		m.storeNext(next)
		return
	}
	next.occ = f.occ
	m.forwardOccurrence(d, next)
}

func (m *master) forwardOccurrence(d store.Due, next *nextTemplate) {
	occ := next.occ
	m.forwarding.Add(1)
	err := m.forward.SendChecked(occ.msg, occ.subject, occ.id, func(err error) {
		m.forwarding.Add(-1)
		if err == nil {
			m.s.metrics.forwarded.Inc()
			m.s.metrics.cronOccurrences.Inc()
			m.s.metrics.lateness.Observe(float64(m.s.clk.Now().UnixMilli()-d.DueMillis) / 1000)
			m.storeNext(next)
			return
		}
		m.s.metrics.forwardErrors.Inc()
		m.lg.Warn("forwarding an occurrence failed, retrying", zap.Stringer("ref", d.Ref), zap.Error(err))
		if !m.closing.Load() {
			m.retries.Add(1)
			time.AfterFunc(time.Second, func() { defer m.retries.Done(); m.forwardOccurrence(d, next) })
		}
	})
	if err != nil {
		m.forwarding.Add(-1)
	}
	if err != nil && !errors.Is(err, producer.ErrClosed) {
		m.lg.Error("cannot forward an occurrence; the schedule ends", zap.Stringer("ref", d.Ref), zap.Error(err))
		m.marks <- d.Ref
	}
}

// storeNext has the next template (none: the schedule ended) appended by
// recurLoop, which then marks the fired one dispatched.
func (m *master) storeNext(next *nextTemplate) {
	if next.tmpl == nil {
		m.marks <- next.ref
		return
	}
	m.nexts.push(next)
}

package delay

import (
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

// recurrence is what the forwarder does with a fired template.
type recurrence struct {
	occurrence []byte // the occurrence to forward; nil: skipped
	next       []byte // the template again, due at the next occurrence; nil: the schedule ended
}

// recur builds the occurrence of a template due at due (fired at now) and
// the next template.
func recur(tmpl []byte, due, now int64, limits protocol.Limits) (recurrence, error) {
	return recurFrom(tmpl, due, now, limits, nil)
}

// recurFrom is recur taking the occurrence from built when it holds it.
func recurFrom(tmpl []byte, due, now int64, limits protocol.Limits, built *occurrences) (recurrence, error) {
	v, err := protocol.ParseMessageNoCRC(tmpl)
	if err != nil {
		return recurrence{}, err
	}
	cs, _, err := ParseCron(&v)
	if err != nil {
		return recurrence{}, err
	}
	var r recurrence
	// Missed occurrences: a further one fell due before now.
	missed := false
	if n, ok := cs.Next(due); ok && n <= now {
		missed = true
	}
	if !missed || !cs.Skip {
		if r.occurrence = built.take(&v, due); r.occurrence == nil {
			if r.occurrence, err = occurrenceOf(&v, due, limits); err != nil {
				return recurrence{}, err
			}
		}
	}
	after := due
	if missed {
		after = now
	}
	if n, ok := cs.Next(after); ok {
		r.next = withDue(tmpl, n)
	}
	return r, nil
}

// occurrenceOf builds the occurrence of template v due at due: a copy
// without the cron properties and the schedule key, id "<template
// id>.<due ms>", created at due, PropCronOccurrence the due time. The same
// template and time always give the same bytes.
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

// occurrences holds occurrences built ahead, when recurLoop stores their
// templates, so that a second's occurrences of many schedules cost the
// forwarder a lookup each rather than a decode and an encode while they
// all fall due together. Keyed by occurrence id, each with its template's
// checksum (a template replaced or rescheduled under the same id is not
// taken for another); one not taken by a minute past its due time (the
// schedule was deleted or moved) is dropped. A miss (after a restart, a
// failover, for the first occurrence) builds the occurrence then.
type occurrences struct {
	mu    sync.Mutex
	m     map[string]builtOccurrence
	swept time.Time
}

type builtOccurrence struct {
	crc uint32 // the template's
	due int64
	msg []byte
}

// Occurrences are built ahead only when due within builtAhead, and at most
// maxBuilt are kept.
const (
	builtAhead = 10 * time.Minute
	maxBuilt   = 1 << 18
)

func newOccurrences() *occurrences { return &occurrences{m: map[string]builtOccurrence{}} }

// build builds ahead the occurrence of a next template (nothing when it
// falls due later than builtAhead from now, or the store is full).
func (o *occurrences) build(tmpl []byte, now time.Time, limits protocol.Limits) {
	due := int64(binary.BigEndian.Uint64(tmpl[16:24]))
	if due > now.Add(builtAhead).UnixMilli() {
		return
	}
	v, err := protocol.ParseMessageNoCRC(tmpl)
	if err != nil {
		return
	}
	occ, err := occurrenceOf(&v, due, limits)
	if err != nil {
		return
	}
	id := string(v.ID) + "." + strconv.FormatInt(due, 10)
	o.mu.Lock()
	defer o.mu.Unlock()
	if now.Sub(o.swept) > time.Minute {
		o.swept = now
		for k, b := range o.m {
			if b.due < now.Add(-time.Minute).UnixMilli() {
				delete(o.m, k)
			}
		}
	}
	if len(o.m) < maxBuilt {
		o.m[id] = builtOccurrence{crc: binary.BigEndian.Uint32(tmpl[0:4]), due: due, msg: occ}
	}
}

// take returns (and forgets) the occurrence of template v due at due, if
// it was built ahead from the same template.
func (o *occurrences) take(v *protocol.View, due int64) []byte {
	if o == nil {
		return nil
	}
	var idb [256 + 24]byte // an id is at most 255 bytes
	id := strconv.AppendInt(append(append(idb[:0], v.ID...), '.'), due, 10)
	o.mu.Lock()
	defer o.mu.Unlock()
	b, ok := o.m[string(id)]
	if !ok {
		return nil
	}
	delete(o.m, string(id))
	if b.crc != binary.BigEndian.Uint32(v.Raw[0:4]) {
		return nil
	}
	return b.msg
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
// send does), then stores the next template, then marks the fired one.
func (m *master) recur(d store.Due, now time.Time) {
	r, err := recurFrom(d.Message, d.DueMillis, now.UnixMilli(), m.s.limits, m.built)
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
			m.s.metrics.lateness.Observe(float64(m.s.clk.Now().UnixMilli()-d.DueMillis) / 1000)
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

// storeNext has the next template (none: the schedule ended) appended by
// recurLoop, which then marks the fired one dispatched.
func (m *master) storeNext(d store.Due, next []byte) {
	if next == nil {
		m.marks <- d.Ref
		return
	}
	m.nexts.push(nextTemplate{ref: d.Ref, msg: next})
}

// nextTemplate is a fired template's successor, waiting to be appended.
type nextTemplate struct {
	ref store.Ref // the fired template, marked once the next one is stored
	msg []byte
}

// nextQueue hands the next templates from the producer's callbacks to
// recurLoop without blocking them; after close it takes none (their fired
// templates stay unmarked and fire again after the restart).
type nextQueue struct {
	mu     sync.Mutex
	items  []nextTemplate
	closed bool
	wake   chan struct{}
}

func newNextQueue() *nextQueue { return &nextQueue{wake: make(chan struct{}, 1)} }

func (q *nextQueue) push(t nextTemplate) {
	q.mu.Lock()
	if !q.closed {
		q.items = append(q.items, t)
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns what is queued (nil and false once closed and empty).
func (q *nextQueue) take() ([]nextTemplate, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items, len(items) > 0 || !q.closed
}

// Next templates are appended once the burst that queued them has settled
// (nothing new for nextQuiet, or nextLinger after the first): the appends,
// their replay and the marks then take no CPU from the burst's forwards,
// whose lateness is what users see. The earliest next occurrence is a
// second away ("@every" counts whole seconds), far beyond nextLinger.
const (
	nextQuiet  = 5 * time.Millisecond
	nextLinger = 50 * time.Millisecond
)

// settle adds to batch what is queued until the queue is quiet.
func (q *nextQueue) settle(batch []nextTemplate) []nextTemplate {
	deadline := time.Now().Add(nextLinger)
	for time.Now().Before(deadline) {
		time.Sleep(nextQuiet)
		more, open := q.take()
		if len(more) == 0 {
			break
		}
		batch = append(batch, more...)
		if !open {
			break
		}
	}
	return batch
}

func (q *nextQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// recurLoop appends the next templates in batches: one Append (one group
// commit, one callback) for all the occurrences a burst of schedules
// forwarded meanwhile, off the producer's callback goroutine, which would
// otherwise check and queue each template on its own while the burst's
// other forwards wait for their answers.
func (m *master) recurLoop() {
	defer close(m.recurDone)
	for {
		batch, more := m.nexts.take()
		if !more {
			return
		}
		if len(batch) == 0 {
			<-m.nexts.wake
			continue
		}
		batch = m.nexts.settle(batch)
		m.appendNext(batch)
	}
}

// appendNext appends next templates and marks their fired ones once each is
// stored. The same template stored already (a template fired again after a
// crash or failover) is a duplicate; another message holding the schedule's
// name ends this chain. A failed append is retried a second later, unless
// the master is closing (the fired template stays unmarked and fires again
// after the restart).
func (m *master) appendNext(batch []nextTemplate) {
	msgs := make([][]byte, len(batch))
	now := m.s.clk.Now()
	for i, t := range batch {
		msgs[i] = t.msg
		m.built.build(t.msg, now, m.s.limits)
	}
	m.retries.Add(1)
	m.store.Append(msgs, func(rs []store.Result) {
		defer m.retries.Done()
		var failed []nextTemplate
		for i, r := range rs {
			switch err := r.Err; {
			case err == nil, errors.Is(err, protocol.ErrDuplicate), errors.Is(err, protocol.ErrKeyExists):
				m.marks <- batch[i].ref
			case m.closing.Load():
			default:
				m.lg.Warn("storing a recurring schedule's next occurrence failed, retrying", zap.Stringer("ref", batch[i].ref), zap.Error(err))
				failed = append(failed, batch[i])
			}
		}
		if len(failed) > 0 {
			m.retries.Add(1)
			time.AfterFunc(time.Second, func() { defer m.retries.Done(); m.appendNext(failed) })
		}
	})
}

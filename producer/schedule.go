package producer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/route"
)

// Control over scheduled messages. A delayed message may carry a schedule
// key (SetScheduleKey): while it is pending, another message of the subject
// with that key is refused with ErrKeyExists by the delay group that holds
// it (keys are unique per delay group: a subject routed to several delay
// groups may hold one pending message per key in each). Cancel and CancelID
// ask every delay group of the subject and give a definite answer: nil (the
// message is cancelled and will never be delivered, also across a delay
// server's crash and, with --wait-slave, a failover), ErrAlreadyFired (it
// has been or will be delivered) or ErrNotFound.

// Errors of the schedule calls; match with errors.Is.
var (
	// ErrKeyExists: a message of the subject with this schedule key is
	// pending (Send of a keyed message).
	ErrKeyExists = protocol.ErrKeyExists
	// ErrAlreadyFired: the scheduled message has been or will be delivered.
	ErrAlreadyFired = protocol.ErrAlreadyFired
	// ErrNotFound: no delay group holds such a message.
	ErrNotFound = protocol.ErrNotFound
)

// SetScheduleKey sets msg's schedule key (protocol.PropScheduleKey),
// replacing an earlier one.
func SetScheduleKey(msg *Message, key string) {
	for i, p := range msg.Properties {
		if p.Key == protocol.PropScheduleKey {
			msg.Properties[i].Value = key
			return
		}
	}
	msg.Properties = append(msg.Properties, Property{Key: protocol.PropScheduleKey, Value: key})
}

// SetScheduleReplace makes a keyed message replace the pending message with
// its key (cancelled and replaced in one step) instead of failing with
// ErrKeyExists.
func SetScheduleReplace(msg *Message) {
	for _, p := range msg.Properties {
		if p.Key == protocol.PropScheduleReplace {
			return
		}
	}
	msg.Properties = append(msg.Properties, Property{Key: protocol.PropScheduleReplace, Value: "1"})
}

// CancelTarget names a scheduled message: by schedule key, or by message
// id when ByID is set (then Key holds the id).
type CancelTarget = protocol.ScheduleTarget

// Cancel cancels the pending message of subject with schedule key key.
func (p *Producer) Cancel(ctx context.Context, subject, key string) error {
	return p.CancelBatch(ctx, []CancelTarget{{Subject: subject, Key: key}})[0]
}

// CancelID cancels the pending message of subject with message id id.
func (p *Producer) CancelID(ctx context.Context, subject, id string) error {
	return p.CancelBatch(ctx, []CancelTarget{{Subject: subject, Key: id, ByID: true}})[0]
}

// CancelBatch cancels many scheduled messages with one request per delay
// group and returns one answer per target, as Cancel does. A target whose
// groups do not all answer (unreachable, not master) is asked again until
// ctx ends (or the send timeout passes); then its error says the message
// may or may not be cancelled.
func (p *Producer) CancelBatch(ctx context.Context, targets []CancelTarget) []error {
	return p.controlBatch(ctx, targets, nil)
}

// Reschedule moves the pending message of subject with schedule key key to
// a new due time, atomically: it is delivered at the new time and never at
// the old one. nil means rescheduled; ErrAlreadyFired, ErrNotFound as
// Cancel; protocol.ErrInvalid for a time not in the future,
// protocol.ErrBeyondHorizon beyond the delay server's horizon.
func (p *Producer) Reschedule(ctx context.Context, subject, key string, at time.Time) error {
	return p.RescheduleBatch(ctx, []CancelTarget{{Subject: subject, Key: key}}, []time.Time{at})[0]
}

// RescheduleID is Reschedule by message id.
func (p *Producer) RescheduleID(ctx context.Context, subject, id string, at time.Time) error {
	return p.RescheduleBatch(ctx, []CancelTarget{{Subject: subject, Key: id, ByID: true}}, []time.Time{at})[0]
}

// RescheduleBatch reschedules targets[i] to at[i], as CancelBatch cancels.
func (p *Producer) RescheduleBatch(ctx context.Context, targets []CancelTarget, at []time.Time) []error {
	dues := make([]int64, len(targets))
	now := p.cfg.now()
	for i := range targets {
		if i >= len(at) || !at[i].After(now) {
			// Checked here too, for a clear message (statuses carry none).
			dues[i] = -1
			continue
		}
		dues[i] = at[i].UnixMilli()
		if at[i].After(time.UnixMilli(dues[i])) {
			dues[i]++ // never before the time asked for
		}
	}
	errs := p.controlBatch(ctx, targets, dues)
	for i := range targets {
		if dues[i] == -1 {
			when := "no time"
			if i < len(at) {
				when = at[i].UTC().Format(time.RFC3339Nano)
			}
			errs[i] = protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("cannot reschedule %s of %q to %s: not after now", targets[i].Key, targets[i].Subject, when))
		}
	}
	return errs
}

// controlBatch cancels (dues nil) or reschedules targets.
func (p *Producer) controlBatch(ctx context.Context, targets []CancelTarget, dues []int64) []error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.sendTimeout)
	defer cancel()
	what := "cancel"
	if dues != nil {
		what = "reschedule"
	}
	errs := make([]error, len(targets))
	todo := make([]int, 0, len(targets))
	for i, t := range targets {
		if err := p.cfg.limits.CheckScheduleTarget(t); err != nil {
			errs[i] = err
			continue
		}
		if dues != nil && dues[i] == -1 {
			continue // refused by RescheduleBatch
		}
		todo = append(todo, i)
	}
	backoff := 20 * time.Millisecond
	for len(todo) > 0 {
		if p.closed.Load() {
			for _, i := range todo {
				errs[i] = ErrClosed
			}
			break
		}
		todo = p.controlRound(ctx, targets, dues, todo, errs)
		if len(todo) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			for _, i := range todo {
				errs[i] = fmt.Errorf("producer: %s of %s: %w (last: %w; it may or may not have taken effect)", what, targets[i].Key, ctx.Err(), errs[i])
			}
			return errs
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
	return errs
}

// controlRound asks every delay group of each target's subject once and
// returns the targets without a definite answer (errs holds why).
func (p *Producer) controlRound(ctx context.Context, targets []CancelTarget, dues []int64, todo []int, errs []error) []int {
	verb := "cancel"
	if dues != nil {
		verb = "reschedule"
	}
	type groupReq struct {
		g       route.Group
		targets []int
	}
	byGroup := map[string]*groupReq{}
	now := p.cfg.now()
	asked := make(map[int]int, len(todo)) // target → groups asked
	for _, i := range todo {
		s := p.sender
		s.mu.Lock()
		e, err := s.resolve(route.ProduceDelay, targets[i].Subject, now)
		var groups []route.Group
		if err == nil {
			groups = e.groups
		}
		s.mu.Unlock()
		if err != nil || len(groups) == 0 {
			if err == nil {
				err = fmt.Errorf("producer: subject %q has no delay groups", targets[i].Subject)
			}
			errs[i] = err
			continue
		}
		for _, g := range groups {
			q := byGroup[g.Name]
			if q == nil {
				q = &groupReq{g: g}
				byGroup[g.Name] = q
			}
			q.targets = append(q.targets, i)
		}
		asked[i] = len(groups)
	}
	// Answers per target: cancelled anywhere wins, then fired anywhere;
	// not found only when every group says so.
	var mu sync.Mutex
	cancelled, fired, notFound := map[int]bool{}, map[int]bool{}, map[int]int{}
	failed := map[int]error{}
	var wg sync.WaitGroup
	for _, q := range byGroup {
		wg.Add(1)
		go func(q *groupReq) {
			defer wg.Done()
			req := protocol.ScheduleRescheduleRequest{Epoch: q.g.Epoch}
			for _, i := range q.targets {
				req.Targets = append(req.Targets, targets[i])
				if dues != nil {
					req.Dues = append(req.Dues, dues[i])
				}
			}
			cmd, body := protocol.CmdScheduleCancel, protocol.AppendScheduleCancelRequest(nil, protocol.ScheduleCancelRequest{Epoch: req.Epoch, Targets: req.Targets})
			if dues != nil {
				cmd, body = protocol.CmdScheduleReschedule, protocol.AppendScheduleRescheduleRequest(nil, req)
			}
			resp, err := p.transport.CallTimeout(ctx, q.g.Addr, cmd, body, p.cfg.requestTime)
			var st []protocol.Status
			if err == nil {
				if st, err = protocol.DecodeSendResponse(resp); err == nil && len(st) != len(q.targets) {
					err = fmt.Errorf("%w: %d statuses for %d targets", protocol.ErrBadRequest, len(st), len(q.targets))
				}
			}
			if err != nil || st == nil {
				p.sender.invalidateRoute(route.ProduceDelay, targets[q.targets[0]].Subject)
			}
			mu.Lock()
			defer mu.Unlock()
			for k, i := range q.targets {
				switch {
				case err != nil:
					failed[i] = fmt.Errorf("producer: %s %s at delay group %s: %w", verb, targets[i].Key, q.g.Name, err)
				case st[k] == protocol.StatusOK:
					cancelled[i] = true
				case st[k] == protocol.StatusAlreadyFired:
					fired[i] = true
				case st[k] == protocol.StatusNotFound:
					notFound[i]++
				default:
					failed[i] = fmt.Errorf("producer: %s %s at delay group %s: %w", verb, targets[i].Key, q.g.Name, protocol.StatusError(st[k], ""))
				}
			}
		}(q)
	}
	wg.Wait()
	var again []int
	for _, i := range todo {
		n, ok := asked[i]
		switch {
		case !ok:
			again = append(again, i) // no route: errs[i] says why
		case cancelled[i]:
			errs[i] = nil
		case fired[i]:
			errs[i] = fmt.Errorf("producer: %s %s of %q: %w", verb, targets[i].Key, targets[i].Subject, ErrAlreadyFired)
		case notFound[i] == n:
			errs[i] = fmt.Errorf("producer: %s %s of %q: %w", verb, targets[i].Key, targets[i].Subject, ErrNotFound)
		default:
			errs[i] = failed[i]
			var pe *protocol.Error
			if errors.As(failed[i], &pe) && !pe.Status.Retryable() {
				continue // definite refusal (invalid, forbidden): not asked again
			}
			again = append(again, i)
		}
	}
	return again
}

// SetExpiry sets msg's expiry (protocol.PropExpireAt): past it the message
// is not delivered (the delay server drops a delayed message that falls due
// after it).
func SetExpiry(msg *Message, at time.Time) {
	v := strconv.FormatInt(at.UnixMilli(), 10)
	for i, p := range msg.Properties {
		if p.Key == protocol.PropExpireAt {
			msg.Properties[i].Value = v
			return
		}
	}
	msg.Properties = append(msg.Properties, Property{Key: protocol.PropExpireAt, Value: v})
}

// Schedule is a recurring schedule (see delay/recurring.go): an occurrence
// of Subject with Body, Tags and Properties is delivered at each time Cron
// names in Zone (a fresh message id per occurrence, its time in the
// property protocol.PropCronOccurrence), until Until.
type Schedule struct {
	// Name identifies the schedule within its subject (its schedule key).
	Name       string
	Subject    string
	Body       []byte
	Tags       []string
	Properties []Property
	// Cron is a cron expression of five fields (minute hour day-of-month
	// month day-of-week) or a descriptor: "@every 10s", "@hourly", "@daily".
	Cron string
	// Zone is the IANA time zone Cron is read in; "" is UTC.
	Zone string
	// Until ends the schedule (zero: never).
	Until time.Time
	// SkipMissed drops occurrences missed while no delay server could fire
	// them; by default one of them is delivered late.
	SkipMissed bool
}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// CreateSchedule stores a recurring schedule in a delay group of its
// subject. It fails with ErrKeyExists when the subject has a schedule (or a
// pending message) of that name, protocol.ErrInvalid for a bad expression
// or zone.
func (p *Producer) CreateSchedule(ctx context.Context, s Schedule) error {
	spec := s.Cron
	if s.Zone != "" {
		if _, err := time.LoadLocation(s.Zone); err != nil {
			return protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("schedule %s: time zone %q: %v", s.Name, s.Zone, err))
		}
		spec = "CRON_TZ=" + s.Zone + " " + spec
	}
	sched, err := cronParser.Parse(spec)
	if err != nil {
		return protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("schedule %s: cron expression %q: %v", s.Name, s.Cron, err))
	}
	// The template is due at the first occurrence far enough ahead to go to
	// a delay group.
	first := sched.Next(p.cfg.now().Add(p.cfg.delayMin))
	if first.IsZero() || !s.Until.IsZero() && first.After(s.Until) {
		return protocol.Errorf(protocol.StatusInvalid, fmt.Sprintf("schedule %s: no occurrence before its end", s.Name))
	}
	m := &Message{Subject: s.Subject, Body: s.Body, Tags: s.Tags, DeliverAt: first,
		Properties: append(append([]Property(nil), s.Properties...), Property{Key: protocol.PropCronSpec, Value: s.Cron})}
	if s.Zone != "" {
		m.Properties = append(m.Properties, Property{Key: protocol.PropCronZone, Value: s.Zone})
	}
	if !s.Until.IsZero() {
		m.Properties = append(m.Properties, Property{Key: protocol.PropCronUntil, Value: strconv.FormatInt(s.Until.UnixMilli(), 10)})
	}
	if s.SkipMissed {
		m.Properties = append(m.Properties, Property{Key: protocol.PropCronMissed, Value: "skip"})
	}
	SetScheduleKey(m, s.Name)
	return p.Send(ctx, m)
}

// DeleteSchedule deletes the recurring schedule name of subject: no
// occurrence is delivered after it returns nil (one in flight at the call
// may still arrive). ErrNotFound: no such schedule (or it has ended).
func (p *Producer) DeleteSchedule(ctx context.Context, subject, name string) error {
	giveUp := time.Now().Add(5 * time.Second)
	for {
		err := p.Cancel(ctx, subject, name)
		if !errors.Is(err, ErrAlreadyFired) {
			return err
		}
		if time.Now().After(giveUp) {
			return fmt.Errorf("producer: delete schedule %s: its last template has fired and no next one follows (ended?): %w", name, err)
		}
		// An occurrence is being sent: its next template follows at once.
		select {
		case <-ctx.Done():
			return fmt.Errorf("producer: delete schedule %s: %w", name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

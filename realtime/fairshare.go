package realtime

import (
	"flag"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// FairShareOptions configure how the broker shares deliveries among the
// pull actors that drain a backlog at the same time (see "Fair share" in
// doc.go).
type FairShareOptions struct {
	// Hold is the longest a pull of an actor over its share waits before it
	// is served (default 50ms; 0 turns fair sharing off). A held pull looks
	// at the shares again every fiftieth of Hold (at least 1ms) and is
	// served as soon as its actor is back within its share. Only pulls that
	// may wait longer than Hold are held.
	Hold time.Duration `yaml:"hold"`
	// Window is the span of recent deliveries that shares are measured over
	// (default 100ms; two periods of Window are kept and the older one fades
	// out linearly).
	Window time.Duration `yaml:"window"`
	// Excess is how far above the others an actor may go before its pulls
	// are held: 1.1 holds an actor that took more than 1.1 times the mean
	// of the window's deliveries to the other actors draining backlogs
	// (default 1.1; at least 1).
	Excess float64 `yaml:"excess"`
	// Busy: shares are enforced only while the pulls of the other groups
	// draining backlogs waited longer than this on average between arriving
	// and their actor taking them, or the broker's goroutines waited longer
	// than this on average for a processor (the Go scheduler's latency,
	// pressureLoop), and for ten Windows after (default 50µs; 0: always).
	// On an idle broker a hungry group that is slow for its own reasons
	// (far away, or on a slow machine) then costs the others nothing.
	Busy time.Duration `yaml:"busy"`
	// RunQueue: shares are also enforced while the broker's threads
	// together waited for a CPU (in the kernel's run queue) longer than
	// this many seconds a second over the last Window, and for ten Windows
	// after (default 0.4; 0: off; read on Linux only). Pulls served inline
	// on the event loop (Options.InlinePulls) wait in no queue of the
	// broker's, so their waits cannot tell that it is busy; a machine whose
	// CPUs the broker queues for can.
	RunQueue float64 `yaml:"run_queue"`
	// HoldCharge is what holding a pull costs its flow, counted in
	// messages (default 64; 0: only messages count). A held pull is
	// parked, timed, looked at again every recheck and answered by a pull
	// worker off the event loop, which costs the broker about what a batch
	// of 64 messages does (see "Fair share" in doc.go): a flow that keeps
	// pulling over its share pays for the work its held pulls make.
	HoldCharge int `yaml:"hold_charge"`
}

// NewFairShareOptions returns the defaults.
func NewFairShareOptions() FairShareOptions {
	return FairShareOptions{
		Hold:     50 * time.Millisecond,
		Window:   100 * time.Millisecond,
		Excess:   1.1,
		Busy:     50 * time.Microsecond,
		RunQueue: 0.4,

		HoldCharge: 64,
	}
}

// AddFlags binds the options to command-line flags.
func (o *FairShareOptions) AddFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.Hold, "fair-share-hold", o.Hold, "longest hold of a pull whose consumer group took more than its share of deliveries (0: off)")
	fs.DurationVar(&o.Window, "fair-share-window", o.Window, "span of recent deliveries that consumer groups' shares are measured over")
	fs.Float64Var(&o.Excess, "fair-share-excess", o.Excess, "how many times the other consumer groups' mean share one may take before its pulls are held")
	fs.DurationVar(&o.Busy, "fair-share-busy", o.Busy, "mean wait of the other groups' pulls in the broker above which shares are enforced (0: always)")
	fs.Float64Var(&o.RunQueue, "fair-share-run-queue", o.RunQueue, "seconds a second the broker's threads wait for a CPU above which shares are enforced too (0: off; Linux)")
	fs.IntVar(&o.HoldCharge, "fair-share-hold-charge", o.HoldCharge, "messages a held pull costs its consumer group's share (0: only messages count)")
}

// Validate checks the options.
func (o *FairShareOptions) Validate() error {
	switch {
	case o.Hold < 0 || o.Hold > time.Second:
		return fmt.Errorf("realtime: fair share hold must be between 0 and 1s, got %v", o.Hold)
	case o.Window < time.Millisecond || o.Window > time.Minute:
		return fmt.Errorf("realtime: fair share window must be between 1ms and 1m, got %v", o.Window)
	case !(o.Excess >= 1 && o.Excess <= 100):
		return fmt.Errorf("realtime: fair share excess must be between 1 and 100, got %v", o.Excess)
	case o.Busy < 0 || o.Busy > time.Second:
		return fmt.Errorf("realtime: fair share busy must be between 0 and 1s, got %v", o.Busy)
	case !(o.RunQueue >= 0 && o.RunQueue <= 1024):
		return fmt.Errorf("realtime: fair share run queue must be between 0 and 1024, got %v", o.RunQueue)
	case o.HoldCharge < 0 || o.HoldCharge > 1<<20:
		return fmt.Errorf("realtime: fair share hold charge must be between 0 and %d, got %d", 1<<20, o.HoldCharge)
	}
	return nil
}

// busyLinger is how many Windows shares stay enforced for a flow after the
// others' pulls last waited longer than Busy. Holding a flow takes load off
// the broker, so the others' waits drop as soon as it is held: judged
// afresh at every look, the gate opened and closed around Busy, the held
// flow was let go whenever it closed, and it took ~2× the others' messages
// (seen beside a flood in one process, the others' mean wait at 46–49 µs
// against a Busy of 50 µs). On a broker that stays idle nothing is held.
const busyLinger = 10

// fairShare measures the recent deliveries of every flow (a pull actor: a
// consumer group of a subject, or a broadcast subscriber) and tells which
// flows took more than their share. A flow contends while one of its pulls
// was hungry in the current or the last period: it asked for a full batch
// (at least half the most one pull of the flow asked for since the flow was
// last idle for a period) and got all of it, so its consumers had room for
// more and a backlog was there to fill it. A group following the tail of
// its subject gets less than it asks for, and one whose handlers are its
// limit asks for the few messages they just finished: neither contends.
// Only contending flows are compared, only when at least two contend, and
// only while the broker is busy: the other contending flows' pulls waited
// in it longer than Busy on average before their actors took them. On an
// idle broker a hungry group that is slow for reasons of its own (far away,
// or a slow machine) costs the others nothing.
//
// Periods are Window long and numbered by the monotonic time since the
// fairShare was made. A flow's recent tally is its current period's plus
// the last period's scaled by the part of it still inside the sliding
// window.
type fairShare struct {
	opts  FairShareOptions
	start time.Time
	held  prometheus.Counter

	mu     sync.Mutex
	period int64 // the current period's number
	// pressedUntil: the broker was last short of CPU (pressureLoop) a
	// busyLinger before then.
	pressedUntil time.Time
	listed       []*flowShare // flows with deliveries in this or the last period
	n            int          // contending flows
	sum          [2]tally     // the contending flows' tallies: this period, the last
}

// tally is what a flow did in one period.
type tally struct {
	msgs  int64         // messages delivered, plus HoldCharge for each pull held
	pulls int64         // pulls taken by its actor
	wait  time.Duration // their total wait from arrival to their actor
}

func (t *tally) add(o tally) { t.msgs, t.pulls, t.wait = t.msgs+o.msgs, t.pulls+o.pulls, t.wait+o.wait }

// flowShare is one flow's record; fairShare.mu guards it.
type flowShare struct {
	t                 [2]tally // this period, the last
	askMax            int      // the most one pull asked for since the flow was listed
	fullCur, fullPrev bool     // a hungry pull in this or the last period
	listed            bool
	heldUntil         time.Time // a pull of the flow is held for fair share until then (its next look)
	busyUntil         time.Time // the others' pulls last waited past Busy a busyLinger before then
}

func (f *flowShare) contending() bool { return f.fullCur || f.fullPrev }

func newFairShare(opts FairShareOptions, reg prometheus.Registerer, group string) *fairShare {
	s := &fairShare{
		opts:  opts,
		start: time.Now(),
		held: prometheus.NewCounter(prometheus.CounterOpts{Name: "qmq_realtime_pulls_held_total",
			Help:        "Pulls held because their consumer group took more than its fair share of deliveries.",
			ConstLabels: prometheus.Labels{"group": group}}),
	}
	if reg != nil {
		reg.MustRegister(s.held)
	}
	return s
}

// pressed records that the broker was short of CPU at now (pressureLoop):
// shares are enforced for busyLinger Windows.
func (s *fairShare) pressed(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pressedUntil = now.Add(busyLinger * s.opts.Window)
}

// inlineOK reports whether a pull of f may be served inline on the event
// loop (Options.InlinePulls) at now: unless f contends with other flows
// while the broker has not been seen busy lately. An inline pull waits in
// no queue, so the waits that open the busy gate would never show; such
// pulls go through the pull workers until they wait there past Busy or the
// broker is short of CPU (pressed), and inline again once the gate is open.
func (s *fairShare) inlineOK(f *flowShare, now time.Time) bool {
	if !s.enabled() {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rollLocked(now)
	return s.n < 2 || !f.contending() || now.Before(f.busyUntil) || now.Before(s.pressedUntil)
}

// recheck is how often a held pull looks at the shares again.
func (s *fairShare) recheck() time.Duration { return max(s.opts.Hold/50, time.Millisecond) }

// enabled reports whether pulls are ever held.
func (s *fairShare) enabled() bool { return s != nil && s.opts.Hold > 0 }

// addLocked adds t to f's current period (and to the sums while f
// contends), listing f.
func (s *fairShare) addLocked(f *flowShare, t tally) {
	if !f.listed {
		f.listed = true
		s.listed = append(s.listed, f)
	}
	f.t[0].add(t)
	if f.contending() {
		s.sum[0].add(t)
	}
}

// record counts n messages delivered at now to f by a pull that asked for
// asked.
func (s *fairShare) record(f *flowShare, n, asked int, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rollLocked(now)
	f.askMax = max(f.askMax, asked)
	if n >= asked && 2*asked >= f.askMax && !f.fullCur {
		if !f.contending() {
			s.n++
			s.sum[0].add(f.t[0])
			s.sum[1].add(f.t[1])
		}
		f.fullCur = true
	}
	s.addLocked(f, tally{msgs: int64(n)})
}

// arrived counts a pull that waited wait before f's actor took it, and
// reports whether f is over its share now (see over). When it is and
// holdUntil is set, the pull is held until then (see holdIfOver) and f is
// charged HoldCharge for it.
func (s *fairShare) arrived(f *flowShare, wait time.Duration, now, holdUntil time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rollLocked(now)
	s.addLocked(f, tally{pulls: 1, wait: wait})
	if !s.holdLocked(f, now, holdUntil) {
		return false
	}
	if !holdUntil.IsZero() {
		s.addLocked(f, tally{msgs: int64(s.opts.HoldCharge)})
	}
	return true
}

// over reports whether f, contending, took more than Excess times the mean
// of the other contending flows' recent deliveries while their pulls waited
// longer than Busy on average. Compared with the others' mean, not with the
// mean of all, two flows can never both be over (Excess ≥ 1), so the
// lighter of two is never held. Flows with a pull held for fair share right
// now are left out of the others: they deliver less because they are held,
// not because they are deprived, and a flow compared with them would be
// held in turn (the two then take turns waiting for the holds' rechecks,
// and both slow down; seen as a flood held to the small group's pace and
// the small group held to the flood's).
func (s *fairShare) over(f *flowShare, now time.Time) bool {
	return s.holdIfOver(f, now, time.Time{})
}

// holdIfOver reports whether f is over its share (see over); when it is
// and holdUntil is set, one of f's pulls is held until holdUntil, which
// leaves f out of the other flows' comparisons until then.
func (s *fairShare) holdIfOver(f *flowShare, now, holdUntil time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rollLocked(now)
	return s.holdLocked(f, now, holdUntil)
}

func (s *fairShare) holdLocked(f *flowShare, now, holdUntil time.Time) bool {
	if !s.overLocked(f, now) {
		return false
	}
	if holdUntil.After(f.heldUntil) {
		f.heldUntil = holdUntil
	}
	return true
}

func (s *fairShare) overLocked(f *flowShare, now time.Time) bool {
	if s.n < 2 || !f.contending() {
		return false
	}
	elapsed := now.Sub(s.start) - time.Duration(s.period)*s.opts.Window
	fade := 1 - float64(elapsed)/float64(s.opts.Window)
	recent := func(t [2]tally) (msgs, pulls, wait float64) {
		return float64(t[0].msgs) + fade*float64(t[1].msgs), float64(t[0].pulls) + fade*float64(t[1].pulls),
			float64(t[0].wait) + fade*float64(t[1].wait)
	}
	msgs, pulls, wait := recent(f.t)
	allMsgs, allPulls, allWait := recent(s.sum)
	othersPulls, othersWait := allPulls-pulls, allWait-wait
	switch {
	case othersPulls <= 0:
		return false
	case othersWait > float64(s.opts.Busy)*othersPulls:
		f.busyUntil = now.Add(busyLinger * s.opts.Window)
	case !now.Before(f.busyUntil) && !now.Before(s.pressedUntil):
		return false // the others' pulls have not been kept waiting lately, nor the broker's threads
	}
	if msgs <= s.opts.Excess*(allMsgs-msgs)/float64(s.n-1) {
		return false
	}
	// Over the others' mean; over the mean of those not held now too?
	// (Leaving a flow out can only raise the mean, so this runs only for
	// a flow already found over.)
	freeMsgs, free := 0.0, 0
	for _, o := range s.listed {
		if o == f || !o.contending() || now.Before(o.heldUntil) {
			continue
		}
		m, _, _ := recent(o.t)
		freeMsgs += m
		free++
	}
	return free > 0 && msgs > s.opts.Excess*freeMsgs/float64(free)
}

// rollLocked starts the period now falls in: this period's tallies become
// the last period's, and flows with no deliveries in either are dropped.
func (s *fairShare) rollLocked(now time.Time) {
	p := int64(now.Sub(s.start) / s.opts.Window)
	if p <= s.period {
		return
	}
	skipped := p > s.period+1 // a whole period passed with no calls: nothing is recent
	s.period = p
	s.n, s.sum = 0, [2]tally{}
	kept := s.listed[:0]
	for _, f := range s.listed {
		f.t = [2]tally{{}, f.t[0]}
		f.fullPrev, f.fullCur = f.fullCur, false
		if skipped {
			f.t[1], f.fullPrev = tally{}, false
		}
		if f.t[1].msgs == 0 && !f.fullPrev {
			f.listed, f.askMax = false, 0
			continue
		}
		kept = append(kept, f)
		if f.contending() {
			s.n++
			s.sum[1].add(f.t[1])
		}
	}
	clear(s.listed[len(kept):])
	s.listed = kept
}

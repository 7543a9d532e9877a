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
	// is served (default 10ms; 0 turns fair sharing off). A pull is held
	// once, and only when it may wait longer than Hold.
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
}

// NewFairShareOptions returns the defaults.
func NewFairShareOptions() FairShareOptions {
	return FairShareOptions{
		Hold:   10 * time.Millisecond,
		Window: 100 * time.Millisecond,
		Excess: 1.1,
	}
}

// AddFlags binds the options to command-line flags.
func (o *FairShareOptions) AddFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.Hold, "fair-share-hold", o.Hold, "longest hold of a pull whose consumer group took more than its share of deliveries (0: off)")
	fs.DurationVar(&o.Window, "fair-share-window", o.Window, "span of recent deliveries that consumer groups' shares are measured over")
	fs.Float64Var(&o.Excess, "fair-share-excess", o.Excess, "how many times its equal share a consumer group may take before its pulls are held")
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
	}
	return nil
}

// fairShare measures the recent deliveries of every flow (a pull actor: a
// consumer group of a subject, or a broadcast subscriber) and tells which
// flows took more than their share. A flow contends while one of its pulls
// was hungry in the current or the last period: it asked for a full batch
// (at least half the most one pull of the flow asked for since the flow was
// last idle for a period) and got all of it, so its consumers had room for more and a backlog was there to
// fill it. A group following the tail of its subject gets less than it asks
// for, and one whose handlers are its limit asks for the few messages they
// just finished: neither contends. Only contending flows are compared, and
// only when at least two contend.
//
// Periods are Window long and numbered by the monotonic time since the
// fairShare was made. A flow's recent deliveries are its current period's
// plus the last period's scaled by the part of it still inside the
// sliding window.
type fairShare struct {
	opts  FairShareOptions
	start time.Time
	held  prometheus.Counter

	mu      sync.Mutex
	period  int64        // the current period's number
	listed  []*flowShare // flows with deliveries in this or the last period
	n       int          // contending flows
	sumCur  int64        // deliveries of the contending flows in this period
	sumPrev int64        // and in the last one
}

// flowShare is one flow's record; fairShare.mu guards it.
type flowShare struct {
	cur, prev         int64 // messages delivered in this and the last period
	askMax            int   // the most one pull asked for since the flow was listed
	fullCur, fullPrev bool  // a hungry pull in this or the last period
	listed            bool
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

// recheck is how often a held pull looks at the shares again.
func (s *fairShare) recheck() time.Duration { return max(s.opts.Hold/5, time.Millisecond) }

// enabled reports whether pulls are ever held.
func (s *fairShare) enabled() bool { return s != nil && s.opts.Hold > 0 }

// record counts n messages delivered at now to f by a pull that asked for
// asked.
func (s *fairShare) record(f *flowShare, n, asked int, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rollLocked(now)
	if !f.listed {
		f.listed = true
		s.listed = append(s.listed, f)
	}
	f.askMax = max(f.askMax, asked)
	full := n >= asked && 2*asked >= f.askMax
	if full && !f.contending() {
		s.n++
		s.sumCur += f.cur
		s.sumPrev += f.prev
	}
	f.fullCur = f.fullCur || full
	f.cur += int64(n)
	if f.contending() {
		s.sumCur += int64(n)
	}
}

// over reports whether f took more than Excess times the mean of the other
// contending flows' recent deliveries. Compared with the others' mean, not
// with the mean of all, two flows can never both be over (Excess ≥ 1), so
// the lighter of two is never held.
func (s *fairShare) over(f *flowShare, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rollLocked(now)
	if s.n < 2 || !f.contending() {
		return false
	}
	elapsed := now.Sub(s.start) - time.Duration(s.period)*s.opts.Window
	fade := 1 - float64(elapsed)/float64(s.opts.Window)
	mine := float64(f.cur) + fade*float64(f.prev)
	others := float64(s.sumCur) + fade*float64(s.sumPrev) - mine
	return mine > s.opts.Excess*others/float64(s.n-1)
}

// rollLocked starts the period now falls in: this period's counts become
// the last period's, and flows with no deliveries in either are dropped.
func (s *fairShare) rollLocked(now time.Time) {
	p := int64(now.Sub(s.start) / s.opts.Window)
	if p <= s.period {
		return
	}
	skipped := p > s.period+1 // a whole period passed with no calls: nothing is recent
	s.period = p
	s.n, s.sumCur, s.sumPrev = 0, 0, 0
	kept := s.listed[:0]
	for _, f := range s.listed {
		f.prev, f.cur = f.cur, 0
		f.fullPrev, f.fullCur = f.fullCur, false
		if skipped {
			f.prev, f.fullPrev = 0, false
		}
		if f.prev == 0 && !f.fullPrev {
			f.listed, f.askMax = false, 0
			continue
		}
		kept = append(kept, f)
		if f.contending() {
			s.n++
			s.sumPrev += f.prev
		}
	}
	clear(s.listed[len(kept):])
	s.listed = kept
}

package realtime

import (
	"math"
	"testing"
	"time"
)

func newTestFairShare(t *testing.T) (*fairShare, time.Time) {
	t.Helper()
	o := NewFairShareOptions()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	s := newFairShare(o, nil, "g")
	return s, s.start
}

// pull records one pull of f that waited wait and was answered with n of
// the asked messages, and reports whether f was over its share on arrival.
func pull(s *fairShare, f *flowShare, wait time.Duration, n, asked int, now time.Time) bool {
	over := s.arrived(f, wait, now, time.Time{})
	s.record(f, n, asked, now)
	return over
}

const busyWait = 200 * time.Microsecond // above the default Busy

func TestFairShare_HoldsOnlyTheGreedyOfContendingFlows(t *testing.T) {
	s, t0 := newTestFairShare(t)
	var big, small, tail flowShare
	now := t0.Add(10 * time.Millisecond)
	for range 10 {
		pull(s, &big, busyWait, 64, 64, now)
	}
	if s.over(&big, now) {
		t.Fatal("a flow alone was held")
	}
	// A group at the tail of its subject gets less than it asks for: it
	// does not contend, and nobody is held on its account.
	pull(s, &tail, busyWait, 3, 64, now)
	if s.over(&big, now) || s.over(&tail, now) {
		t.Fatal("a flow was held beside a tail follower")
	}
	pull(s, &small, busyWait, 64, 64, now)
	if !s.over(&big, now) {
		t.Fatal("the flow with 10× the deliveries of the other contending flow was not held")
	}
	if s.over(&small, now) || s.over(&tail, now) {
		t.Fatal("a flow under its share was held")
	}
	// Within Excess of each other, neither is held.
	for range 9 {
		pull(s, &small, busyWait, 64, 64, now)
	}
	if s.over(&big, now) || s.over(&small, now) {
		t.Fatalf("flows within %.2f× of each other held", s.opts.Excess)
	}
	for range 3 {
		pull(s, &small, busyWait, 64, 64, now)
	}
	if !s.over(&small, now) || s.over(&big, now) {
		t.Fatal("the lead did not pass to the flow that took more")
	}
}

// On an idle broker (the others' pulls are taken at once) a group that is
// slow for its own reasons, far away or on a slow machine, costs the fast
// one nothing; once the others' pulls wait, shares are enforced.
func TestFairShare_OnlyWhileTheOthersWait(t *testing.T) {
	s, t0 := newTestFairShare(t)
	var fast, far flowShare
	now := t0.Add(10 * time.Millisecond)
	for range 100 {
		pull(s, &fast, 20*time.Microsecond, 64, 64, now)
	}
	pull(s, &far, 20*time.Microsecond, 64, 64, now)
	if s.over(&fast, now) {
		t.Fatal("fast held while the other group's pulls were taken at once")
	}
	for range 3 {
		pull(s, &far, time.Millisecond, 64, 64, now)
	}
	if !s.over(&fast, now) {
		t.Fatal("fast not held while the other group's pulls waited 1ms")
	}
	// The fast group's own waits (its pulls queue in its own actor) do not
	// count as the others'.
	var fast2, far2 flowShare
	s2, t2 := newTestFairShare(t)
	for range 100 {
		pull(s2, &fast2, 10*time.Millisecond, 64, 64, t2)
	}
	pull(s2, &far2, 20*time.Microsecond, 64, 64, t2)
	if s2.over(&fast2, t2) {
		t.Fatal("fast held because of its own pulls' waits")
	}
}

// Pulls served inline wait for nothing the broker sees: the broker's
// threads queueing for a CPU (pressureLoop) opens the gate instead, for
// busyLinger Windows.
func TestFairShare_RunQueuePressureOpensTheGate(t *testing.T) {
	s, t0 := newTestFairShare(t)
	w := s.opts.Window
	var fast, small flowShare
	now := t0.Add(10 * time.Millisecond)
	for range 100 {
		pull(s, &fast, 0, 64, 64, now)
	}
	for range 3 {
		pull(s, &small, 0, 64, 64, now)
	}
	if s.over(&fast, now) {
		t.Fatal("fast held with no pull waiting and no pressure")
	}
	s.pressed(now)
	if !s.over(&fast, now) {
		t.Fatal("fast not held while the broker's threads queued for a CPU")
	}
	if s.over(&small, now) {
		t.Fatal("the lighter flow held under pressure")
	}
	for i := 1; i <= busyLinger+3; i++ {
		at := now.Add(time.Duration(i) * w)
		for range 100 {
			pull(s, &fast, 0, 64, 64, at)
		}
		for range 3 {
			pull(s, &small, 0, 64, 64, at)
		}
		held := s.over(&fast, at)
		switch {
		case i < busyLinger && !held:
			t.Fatalf("period %d: fast let go %d periods after the last pressure", i, i)
		case i > busyLinger && held:
			t.Fatalf("period %d: fast still held %d periods after the last pressure", i, i)
		}
	}
}

// Holding the greedy flow takes load off the broker, so the others' pulls
// soon wait less: shares stay enforced for busyLinger Windows after the
// others last waited, and lapse only after that.
func TestFairShare_BusyLingers(t *testing.T) {
	s, t0 := newTestFairShare(t)
	w := s.opts.Window
	var fast, far flowShare
	now := t0.Add(10 * time.Millisecond)
	for range 100 {
		pull(s, &fast, 20*time.Microsecond, 64, 64, now)
	}
	for range 3 {
		pull(s, &far, time.Millisecond, 64, 64, now)
	}
	if !s.over(&fast, now) {
		t.Fatal("fast not held while the other group's pulls waited 1ms")
	}
	// From the next period on the far group's pulls are taken at once.
	for i := 1; i <= busyLinger+3; i++ {
		at := t0.Add(time.Duration(i) * w)
		for range 100 {
			pull(s, &fast, 20*time.Microsecond, 64, 64, at)
		}
		for range 3 {
			pull(s, &far, 10*time.Microsecond, 64, 64, at)
		}
		// The waits of 1ms fade out over the first period after them.
		held := s.over(&fast, at)
		switch {
		case i < busyLinger && !held:
			t.Fatalf("period %d: fast let go %d periods after the others last waited", i, i)
		case i >= busyLinger+2 && held:
			t.Fatalf("period %d: fast still held %d periods after the others last waited", i, i)
		}
	}
}

// A flow whose pulls are held for fair share delivers less because it is
// held: the flows beside it are not held on its account (they would be in
// turn, and both would wait on the holds' rechecks). Once its hold lapses
// it counts again.
func TestFairShare_HeldFlowHoldsNobodyElse(t *testing.T) {
	s, t0 := newTestFairShare(t)
	var big, small flowShare
	now := t0.Add(10 * time.Millisecond)
	for range 10 {
		pull(s, &big, busyWait, 64, 64, now)
	}
	pull(s, &small, busyWait, 64, 64, now)
	until := now.Add(s.recheck())
	if !s.holdIfOver(&big, now, until) {
		t.Fatal("big not held")
	}
	// While big is held, small runs ahead of it: not held.
	for range 20 {
		pull(s, &small, busyWait, 64, 64, now)
	}
	if s.over(&small, now) {
		t.Fatal("small held while the flow it was compared with was held")
	}
	// The hold lapses (big's pulls were served): small, far ahead, is held.
	after := until.Add(time.Microsecond)
	if !s.over(&small, after) {
		t.Fatal("small, 2× big's deliveries, not held once big's hold lapsed")
	}
	// A pull that is not held (holdUntil zero) holds nothing.
	if !s.holdIfOver(&small, after, time.Time{}) || s.over(&big, after) {
		t.Fatal("an unheld query changed who is held")
	}
}

// Holding a pull costs the broker work (a park, rechecks, a worker's
// answer): the held flow pays HoldCharge for each, so a flow that keeps
// pulling over its share stays held longer; with HoldCharge 0 only
// messages count.
func TestFairShare_HoldsCostTheHeldFlow(t *testing.T) {
	for _, charge := range []int{64, 0} {
		o := NewFairShareOptions()
		o.HoldCharge = charge
		if err := o.Validate(); err != nil {
			t.Fatal(err)
		}
		s := newFairShare(o, nil, "g")
		var big, small flowShare
		now := s.start.Add(10 * time.Millisecond)
		for range 12 {
			pull(s, &big, busyWait, 64, 64, now)
		}
		for range 10 {
			pull(s, &small, busyWait, 64, 64, now)
		}
		// big (768 against 640 messages) is over 1.1× small's share: its
		// next pull is held.
		until := now.Add(s.recheck())
		if !s.arrived(&big, busyWait, now, until) {
			t.Fatalf("charge %d: big not held", charge)
		}
		// small takes one batch more (704 against 768 messages, within
		// 1.1×); charged for its hold (832), big stays over.
		pull(s, &small, busyWait, 64, 64, now)
		after := until.Add(time.Microsecond)
		if got := s.over(&big, after); got != (charge > 0) {
			t.Fatalf("charge %d: big over its share once small caught up with its messages: %v, want %v", charge, got, charge > 0)
		}
		if s.over(&small, after) {
			t.Fatalf("charge %d: small held", charge)
		}
	}
}

func TestFairShare_SharesFadeWithTheWindow(t *testing.T) {
	s, t0 := newTestFairShare(t)
	w := s.opts.Window
	var big, small flowShare
	pull(s, &big, busyWait, 1000, 1000, t0.Add(w/2))
	pull(s, &small, busyWait, 100, 100, t0.Add(w/2))
	if !s.over(&big, t0.Add(w/2)) {
		t.Fatal("big not held")
	}
	// In the next period the last one counts for the part of it still in
	// the window: at 0.9 of the period, 1000 counts as 100 and 100 as 10;
	// small's 200 new ones put it ahead.
	at := t0.Add(w + w*9/10)
	pull(s, &big, busyWait, 0, 1000, at)
	pull(s, &small, busyWait, 200, 200, at)
	if s.over(&big, at) {
		t.Fatal("big still held once its deliveries left the window")
	}
	if !s.over(&small, at) {
		t.Fatal("small not held once it took more than big in the window")
	}
	// Two periods without a pull: nobody contends any more.
	at = t0.Add(4 * w)
	if s.over(&big, at) || s.over(&small, at) {
		t.Fatal("held on deliveries older than the window")
	}
	if len(s.listed) != 0 || s.n != 0 {
		t.Fatalf("stale flows kept: listed %d, contending %d", len(s.listed), s.n)
	}
}

func TestFairShare_ContentionEndsWithTheBacklog(t *testing.T) {
	s, t0 := newTestFairShare(t)
	w := s.opts.Window
	var big, small flowShare
	pull(s, &big, busyWait, 1000, 1000, t0)
	pull(s, &small, busyWait, 10, 10, t0)
	if !s.over(&big, t0) {
		t.Fatal("big not held")
	}
	// Small drained its backlog: its pulls come back short. One period
	// later it still contends (its last full pull is in the window), two
	// periods later it does not.
	pull(s, &big, busyWait, 1000, 1000, t0.Add(w))
	pull(s, &small, busyWait, 2, 10, t0.Add(w))
	if !s.over(&big, t0.Add(w)) {
		t.Fatal("big not held while small's last backlog is in the window")
	}
	pull(s, &big, busyWait, 1000, 1000, t0.Add(2*w))
	pull(s, &small, busyWait, 2, 10, t0.Add(2*w))
	if s.over(&big, t0.Add(2*w)) {
		t.Fatal("big held beside a group that follows the tail")
	}
}

// A group whose handlers are its limit asks for the few messages they just
// finished: it gets them all, but does not contend, so a fast group beside
// it runs free.
func TestFairShare_SelfLimitedGroupDoesNotContend(t *testing.T) {
	s, t0 := newTestFairShare(t)
	w := s.opts.Window
	var fast, slow flowShare
	for range 100 {
		pull(s, &fast, busyWait, 64, 64, t0)
	}
	pull(s, &slow, busyWait, 64, 64, t0) // its first pull: a full batch
	if !s.over(&fast, t0) {
		t.Fatal("fast not held beside a group that took a full batch")
	}
	// From then on the slow group asks for what its handlers finished.
	for i := 1; i <= 5; i++ {
		at := t0.Add(time.Duration(i) * w)
		for range 100 {
			pull(s, &fast, busyWait, 64, 64, at)
		}
		for range 5 {
			pull(s, &slow, busyWait, 2, 2, at)
		}
		if i >= 2 && s.over(&fast, at) {
			t.Fatalf("period %d: fast held beside a group limited by its own handlers", i)
		}
	}
}

func TestFairShareOptions_Validate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*FairShareOptions)
	}{
		{"negative hold", func(o *FairShareOptions) { o.Hold = -time.Millisecond }},
		{"hold over a second", func(o *FairShareOptions) { o.Hold = 2 * time.Second }},
		{"tiny window", func(o *FairShareOptions) { o.Window = time.Microsecond }},
		{"excess below 1", func(o *FairShareOptions) { o.Excess = 0.9 }},
		{"excess NaN", func(o *FairShareOptions) { o.Excess = math.NaN() }},
		{"negative busy", func(o *FairShareOptions) { o.Busy = -time.Microsecond }},
		{"negative run queue", func(o *FairShareOptions) { o.RunQueue = -0.1 }},
		{"run queue NaN", func(o *FairShareOptions) { o.RunQueue = math.NaN() }},
		{"negative hold charge", func(o *FairShareOptions) { o.HoldCharge = -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewFairShareOptions()
			tc.mutate(&o)
			if o.Validate() == nil {
				t.Fatalf("%+v accepted", o)
			}
		})
	}
	o := NewFairShareOptions()
	o.Hold, o.Busy, o.RunQueue, o.HoldCharge = 0, 0, 0, 0
	if err := o.Validate(); err != nil {
		t.Fatalf("hold 0 (off), busy 0 (always), run queue 0 (off) and hold charge 0 refused: %v", err)
	}
}

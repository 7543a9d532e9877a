package partition

import (
	"errors"
	"fmt"
	"time"
)

const (
	// SlowDelay and SlowLoss are the slow scenario's link (each direction).
	SlowDelay = 200 * time.Millisecond
	SlowLoss  = 0.05
	// settleTimeout bounds the wait for groups to pair again, before a
	// scenario and after its heal, and for a group's first
	// acknowledgement after a heal.
	settleTimeout = 30 * time.Second
)

// roles is who is master and slave of each group when a scenario starts.
type roles map[string][2]*server // group → master, slave

// scenario cuts the cluster and returns what heals it.
type scenario func(c *Cluster, r roles) (heal func() error, err error)

var scenarios = map[string]scenario{
	"master-meta": func(c *Cluster, r roles) (func() error, error) {
		for _, ms := range r {
			if err := c.Lab.CutBoth(ms[0].host, "meta"); err != nil {
				return nil, err
			}
		}
		return c.Lab.HealAll, nil
	},
	"master-slave": func(c *Cluster, r roles) (func() error, error) {
		for _, ms := range r {
			if err := c.Lab.CutBoth(ms[0].host, ms[1].host); err != nil {
				return nil, err
			}
		}
		return c.Lab.HealAll, nil
	},
	"master-isolated": func(c *Cluster, r roles) (func() error, error) {
		for _, ms := range r {
			if err := c.Lab.CutBoth(ms[0].host, "meta"); err != nil {
				return nil, err
			}
			if err := c.Lab.CutBoth(ms[0].host, ms[1].host); err != nil {
				return nil, err
			}
		}
		return c.Lab.HealAll, nil
	},
	"client-meta": func(c *Cluster, r roles) (func() error, error) {
		return c.Lab.HealAll, c.Lab.CutBoth("cli", "meta")
	},
	"asymmetric": func(c *Cluster, r roles) (func() error, error) {
		if ms, ok := r[RealtimeGroup]; ok {
			if err := c.Lab.Cut(ms[0].host, ms[1].host); err != nil {
				return nil, err
			}
		}
		if ms, ok := r[DelayGroup]; ok {
			if err := c.Lab.Cut("meta", ms[0].host); err != nil {
				return nil, err
			}
		}
		return c.Lab.HealAll, nil
	},
	"slow": func(c *Cluster, r roles) (func() error, error) {
		var slowed []string
		heal := func() error {
			var errs []error
			for _, h := range slowed {
				_, err := c.Lab.Unslow(h)
				errs = append(errs, err)
			}
			return errors.Join(errs...)
		}
		for _, ms := range r {
			if err := c.Lab.Slow(ms[0].host, SlowDelay, SlowLoss); err != nil {
				return heal, err
			}
			slowed = append(slowed, ms[0].host)
		}
		return heal, nil
	},
}

// kinds maps a group to the kind of routed sends it acknowledges.
var kinds = map[string]string{RealtimeGroup: "r", DelayGroup: "d"}

// runScenario waits for the groups to pair, cuts, holds, heals and
// measures.
func (c *Cluster) runScenario(o Options, led *ledger, name string) (sr ScenarioResult) {
	sr = ScenarioResult{Name: name, Recovery: map[string]time.Duration{}}
	r := roles{}
	for _, g := range c.groupNames() {
		if err := waitFor(settleTimeout, g+" paired before "+name, func() error { return c.paired(g) }); err != nil {
			o.Logf("%v", err)
		}
		m, s, err := c.masterSlave(g)
		if err != nil {
			sr.Err = err
			return sr
		}
		r[g] = [2]*server{m, s}
	}
	desc := ""
	for g, ms := range r {
		desc += fmt.Sprintf(" %s: %s master, %s slave;", g, ms[0].name, ms[1].name)
	}
	o.Logf("%s: cutting;%s", name, desc)
	heal, err := scenarios[name](c, r)
	if err != nil {
		if heal != nil {
			heal()
		}
		c.Lab.HealAll()
		sr.Err = err
		return sr
	}
	cut := time.Now()
	time.Sleep(o.Hold)
	if err := heal(); err != nil {
		sr.Err = err
		return sr
	}
	healed := time.Now()
	defer func() {
		sr.Stall = map[string]time.Duration{}
		for _, g := range c.groupNames() {
			sr.Stall[g] = led.maxGap(kinds[g], cut, healed.Add(sr.Recovery[g]))
		}
	}()
	for _, g := range c.groupNames() {
		kind := kinds[g]
		if err := waitFor(settleTimeout, g+" acknowledging after the heal of "+name, func() error {
			at, ok := led.firstAckAfter(kind, healed)
			if !ok {
				return errors.New("no acknowledgement yet")
			}
			sr.Recovery[g] = at.Sub(healed)
			return nil
		}); err != nil {
			sr.Recovery[g] = settleTimeout
			sr.Err = errors.Join(sr.Err, err)
		}
	}
	err = waitFor(settleTimeout, "groups paired after "+name, func() error {
		for _, g := range c.groupNames() {
			if err := c.paired(g); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		sr.Err = errors.Join(sr.Err, err)
		for _, g := range c.groupNames() {
			for _, s := range c.groups[g] {
				o.Logf("%s: the end of %s's log:\n%s", name, s.name, c.logTail(s))
			}
		}
	} else {
		sr.Rejoin = time.Since(healed)
	}
	return sr
}

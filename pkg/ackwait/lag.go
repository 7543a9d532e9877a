package ackwait

import "time"

// maxSamples bounds the samples kept: when full, every other one after the
// oldest is dropped, so the oldest (which dates the lag) always stays.
const maxSamples = 4096

// Lag dates the ends a slave has not acknowledged yet: Sample records the
// master's end now and then, Acknowledged drops what the slave reached,
// and Age is how long ago the oldest end still unacknowledged was
// recorded. The zero value is empty and ready.
type Lag struct {
	samples []sample
}

type sample struct {
	end int64
	at  time.Time
}

// Sample records that the master's end was end at time at, unless the
// slave already holds it (acked ≥ end: no lag, every sample is dropped) or
// the last sample has it already.
func (l *Lag) Sample(end, acked int64, at time.Time) {
	if acked >= end {
		l.Reset()
		return
	}
	n := len(l.samples)
	if n > 0 && l.samples[n-1].end >= end {
		return
	}
	if n == maxSamples {
		k := 1
		for i := 2; i < n; i += 2 {
			l.samples[k] = l.samples[i]
			k++
		}
		l.samples = l.samples[:k]
	}
	l.samples = append(l.samples, sample{end: end, at: at})
}

// Acknowledged drops the samples the slave's position pos covers.
func (l *Lag) Acknowledged(pos int64) {
	k := 0
	for k < len(l.samples) && l.samples[k].end <= pos {
		k++
	}
	l.samples = append(l.samples[:0], l.samples[k:]...)
}

// Reset drops every sample (no lag).
func (l *Lag) Reset() { l.samples = l.samples[:0] }

// Age returns how long before now the oldest unacknowledged end was
// sampled; 0 when there is none.
func (l *Lag) Age(now time.Time) time.Duration {
	if len(l.samples) == 0 {
		return 0
	}
	return now.Sub(l.samples[0].at)
}

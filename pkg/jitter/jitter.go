// Package jitter is how QMQ-Go waits between retries: an exponential
// back-off with jitter, computed by github.com/cenkalti/backoff/v5.
//
// The n-th wait in a row is Min·2^(n-1), capped at Max, times a random
// factor in [0.5, 1.5], and never more than Max: many clients that failed
// together (a broker restarts, a master fails over) spread their retries
// instead of retrying in lockstep.
package jitter

import (
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Randomization is the jitter: a wait is its exponential value times a
// random factor in [1-Randomization, 1+Randomization] (then capped at Max).
const Randomization = 0.5

// Multiplier is the growth of the exponential value from one wait to the
// next.
const Multiplier = 2

// maxSteps bounds Nth's walk: by then any Max ≥ Min is reached.
const maxSteps = 64

// Backoff is a back-off for a loop that retries: Next after each failure,
// Reset after a success. It is not safe for concurrent use.
type Backoff struct {
	exp backoff.ExponentialBackOff
	max time.Duration
}

// New returns a back-off from min to max (min ≤ max, both positive).
func New(min, max time.Duration) *Backoff {
	b := &Backoff{max: max}
	b.exp = backoff.ExponentialBackOff{InitialInterval: min, RandomizationFactor: Randomization, Multiplier: Multiplier, MaxInterval: max}
	b.exp.Reset()
	return b
}

// Next returns the wait after one more failure.
func (b *Backoff) Next() time.Duration { return min(b.exp.NextBackOff(), b.max) }

// Reset starts the back-off over (after a success).
func (b *Backoff) Reset() { b.exp.Reset() }

// Nth returns the wait after the n-th failure in a row (n ≥ 1; less counts
// as 1), for callers that keep only a count, such as a message's attempts.
func Nth(min, max time.Duration, n int) time.Duration {
	b := New(min, max)
	d := b.Next()
	for i := 1; i < n && i < maxSteps; i++ {
		d = b.Next()
	}
	return d
}

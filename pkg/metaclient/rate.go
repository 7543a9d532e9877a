package metaclient

import (
	"sync"
	"time"
)

// Rates turns two growing counters (messages in, messages out) into
// per-second rates between calls, for a broker's Report func.
type Rates struct {
	mu      sync.Mutex
	at      time.Time
	in, out int64
}

// Update records the counters' current values and returns the rates since
// the previous call (0 on the first).
func (r *Rates) Update(in, out int64) (inPerSec, outPerSec uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if !r.at.IsZero() {
		if secs := now.Sub(r.at).Seconds(); secs > 0 {
			inPerSec = uint32(max(float64(in-r.in), 0) / secs)
			outPerSec = uint32(max(float64(out-r.out), 0) / secs)
		}
	}
	r.at, r.in, r.out = now, in, out
	return inPerSec, outPerSec
}

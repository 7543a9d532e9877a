package netserver

import (
	"sync"
	"time"
)

// Log rates: lines a second, and lines at once. Closes are logged more
// freely than what a stranger can cause at will (refused requests, failed
// handshakes), which must not flood the log.
const (
	closeLogRate  = 20
	closeLogBurst = 50
	noisyLogRate  = 2
	noisyLogBurst = 5
)

// logLimit is a token bucket for log lines: at most burst at once and rate
// a second after that. It counts the lines it held back; the next line let
// through reports them. Safe for concurrent use.
type logLimit struct {
	mu      sync.Mutex
	rate    float64
	burst   float64
	tokens  float64
	last    time.Time
	dropped int
}

func (l *logLimit) init(rate, burst int) {
	l.rate, l.burst, l.tokens = float64(rate), float64(burst), float64(burst)
}

// allow reports whether a line may be logged now and, if so, how many were
// held back since the last one.
func (l *logLimit) allow() (ok bool, dropped int) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	}
	l.last = now
	if l.tokens < 1 {
		l.dropped++
		return false, 0
	}
	l.tokens--
	dropped, l.dropped = l.dropped, 0
	return true, dropped
}

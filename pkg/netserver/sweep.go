package netserver

import (
	"time"

	"go.uber.org/zap"
)

// Bounds of the sweep's period: a quarter of the shortest time it
// enforces, within these.
const (
	minSweepInterval = 5 * time.Millisecond
	maxSweepInterval = 250 * time.Millisecond
)

// sweepInterval returns how often the sweep looks at the connections.
func (s *Server) sweepInterval() time.Duration {
	d := min(maxSweepInterval, refuseLinger/4)
	if s.opts.IdleTimeout > 0 {
		d = min(d, s.opts.IdleTimeout/4)
	}
	if s.opts.MinReadRate > 0 {
		d = min(d, s.opts.ReadRateWindow/4)
	}
	return max(d, minSweepInterval)
}

// sweepLoop closes idle connections (IdleTimeout), those whose frame in
// progress arrives too slowly (MinReadRate) and refused gnet connections
// done lingering, looking at every connection once per sweepInterval. The
// loops and readers only count bytes and requests (Conn.received, held,
// framing), so the limits cost nothing per request. Every framePoolIdle it
// also trims the frame pool (framePool.trim). It returns when Close closes
// sweepQuit.
func (s *Server) sweepLoop() {
	defer close(s.sweepDone)
	interval := s.sweepInterval()
	t := time.NewTicker(interval)
	defer t.Stop()
	var idle, slow, lingered []*Conn
	last := time.Now()
	trimmed := last
	for {
		select {
		case <-s.sweepQuit:
			return
		case now := <-t.C:
			if now.Sub(trimmed) >= framePoolIdle {
				trimmed = now
				s.frames.trim()
			}
			// A tick this late means the whole process stalled (the
			// machine is overloaded): the loops may not have read either,
			// so read rates start over instead of blaming the clients.
			stalled := now.Sub(last) > 2*interval
			last = now
			idle, slow, lingered = idle[:0], slow[:0], lingered[:0]
			s.live.each(func(c *Conn) {
				switch c.sweep(now, stalled) {
				case sweepIdle:
					idle = append(idle, c)
				case sweepSlow:
					slow = append(slow, c)
				case sweepLingered:
					lingered = append(lingered, c)
				}
			})
			for _, c := range lingered {
				c.close() // its reason was logged when it was refused
			}
			for _, c := range idle {
				s.closedIdle.Add(1)
				c.closeWithReason("idle for IdleTimeout", zap.Duration("limit", s.opts.IdleTimeout))
			}
			for _, c := range slow {
				s.closedSlow.Add(1)
				c.closeWithReason("frame arriving slower than MinReadRate",
					zap.Int("bytesPerSecond", s.opts.MinReadRate), zap.Duration("window", s.opts.ReadRateWindow),
					zap.Int64("received", c.rateSeen), zap.Duration("in", now.Sub(c.rateFrom)))
			}
			clear(idle)
			clear(slow)
			clear(lingered)
		}
	}
}

// startSweep starts sweepLoop; stopSweep stops it (if it was started).
func (s *Server) startSweep() {
	s.sweeping.Store(true)
	go s.sweepLoop()
}

func (s *Server) stopSweep() {
	close(s.sweepQuit)
	if s.sweeping.Load() {
		<-s.sweepDone
	}
}

type sweepVerdict uint8

const (
	sweepKeep sweepVerdict = iota
	sweepIdle
	sweepSlow
	sweepLingered
)

// sweep looks at the connection for the sweep goroutine: it is idle when
// it has had no frame in progress, no request in flight and no bytes for
// IdleTimeout, and slow when a frame has been in progress for a whole
// ReadRateWindow during which fewer than MinReadRate bytes a second came
// (stalled: the process stalled since the last look; the window starts
// over).
func (c *Conn) sweep(now time.Time, stalled bool) sweepVerdict {
	if c.sweepClosed {
		return sweepKeep // closing already
	}
	if stalled {
		c.rateFrom = time.Time{}
	}
	v := c.sweepLook(now)
	c.sweepClosed = v != sweepKeep
	return v
}

func (c *Conn) sweepLook(now time.Time) sweepVerdict {
	if since := c.lingerSince.Load(); since != 0 {
		if now.Sub(time.Unix(0, since)) >= refuseLinger {
			return sweepLingered
		}
		return sweepKeep
	}
	o := &c.srv.opts
	received, framing, busy := c.received.Load(), c.framing.Load(), c.held.Load() > 0
	if received != c.sweepReceived || busy || c.sweepActive.IsZero() {
		c.sweepReceived, c.sweepActive = received, now
	}
	if o.MinReadRate > 0 {
		switch {
		case !framing:
			c.rateFrom = time.Time{}
		case c.rateFrom.IsZero():
			c.rateFrom, c.rateBytes = now, received
		default:
			if d := now.Sub(c.rateFrom); d >= o.ReadRateWindow {
				if float64(received-c.rateBytes) < float64(o.MinReadRate)*d.Seconds() {
					c.rateSeen = received - c.rateBytes
					return sweepSlow
				}
				c.rateFrom, c.rateBytes = now, received
			}
		}
	}
	if o.IdleTimeout > 0 && !framing && !busy && now.Sub(c.sweepActive) >= o.IdleTimeout {
		return sweepIdle
	}
	return sweepKeep
}

package store

import (
	"errors"
	"time"

	"github.com/qmq-go/qmq/pkg/segment"
	"go.uber.org/zap"
)

const (
	// zeroFillInterval is how often zeroFillLoop looks at the log's end.
	zeroFillInterval = 20 * time.Millisecond
	// zeroFillPerRun bounds one run's zeros (2 MiB each 20 ms: at most 100
	// MB/s of extra writes).
	zeroFillPerRun = 2 << 20
	// zeroFillMaxRate: once the log grew faster than this (bytes a second)
	// between two runs, nothing is filled for zeroFillRateWindow. Its
	// group commits are then large, so the conversions are a small part of
	// each sync, and the zeros would double the disk's writes: with a fill
	// that kept up, one producer flat out on one subject stored a fifth to
	// a third fewer messages a second. The rate is taken run to run (20
	// ms), not over the window: measured over a whole second, a log that
	// had been idle for part of it looked slow, and a fill ran beside a
	// writer at 200 MB/s (NOTES.md, "Zero filling a fast log").
	zeroFillMaxRate    = 32 << 20
	zeroFillRateWindow = time.Second
)

// zeroFillLoop keeps the message log written with zeros ZeroFillAhead
// bytes ahead of its end under FlushSync (segment.Log.ZeroFill; doc.go,
// Zero filling). It stops with the store's background loops.
func (s *Store) zeroFillLoop() {
	z := zeroFiller{ahead: s.opts.ZeroFillAhead}
	s.every(zeroFillInterval, func() {
		n, err := z.run(s.msgLog, time.Now())
		s.stats.zeroFilled.Add(n)
		switch {
		case errors.Is(err, errors.ErrUnsupported):
			s.lg.Info("message log zero fill unavailable on this file system", zap.Error(err))
		case err != nil:
			s.lg.Warn("message log zero fill failed; appends go on without it", zap.Error(err))
		}
	})
}

// zeroFiller remembers how far it filled, so a run does not fill again
// what it filled, and gives up for good where the files cannot be filled.
type zeroFiller struct {
	ahead   int64
	lastEnd int64
	done    int64 // filled up to here
	off     bool
	// The log's growth: end at rateAt (the last run), and until when it
	// counts as fast (it grew faster than zeroFillMaxRate between two runs
	// less than zeroFillRateWindow before).
	rateEnd   int64
	rateAt    time.Time
	fastUntil time.Time
}

// run fills from the log's end, or where the last run stopped, towards end
// + ahead, at most zeroFillPerRun bytes, unless the log grows fast (see
// zeroFillMaxRate); it returns the bytes filled.
func (z *zeroFiller) run(log *segment.Log, now time.Time) (int64, error) {
	if z.off {
		return 0, nil
	}
	end := log.End()
	if end < z.lastEnd {
		z.done = end // cut back (Reset): what was filled past it is gone
	}
	z.lastEnd = end
	if elapsed := now.Sub(z.rateAt); !z.rateAt.IsZero() && end >= z.rateEnd && elapsed > 0 &&
		float64(end-z.rateEnd) > zeroFillMaxRate*elapsed.Seconds() {
		z.fastUntil = now.Add(zeroFillRateWindow)
	}
	z.rateEnd, z.rateAt = end, now
	if now.Before(z.fastUntil) {
		return 0, nil
	}
	from := max(end, z.done)
	to := min(end+z.ahead, from+zeroFillPerRun)
	if from >= to {
		return 0, nil
	}
	got, err := log.ZeroFill(from, to)
	if errors.Is(err, errors.ErrUnsupported) {
		z.off = true
	}
	if got <= from {
		return 0, err
	}
	// Measured from the 4 KiB boundary ZeroFill started at, near enough.
	n := got - from
	z.done = got
	return n, err
}

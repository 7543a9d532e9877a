package delay

import (
	"errors"
	"math"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/qmq-go/qmq/delay/store"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// nextTemplate is a fired template whose successor waits to be appended.
type nextTemplate struct {
	ref  store.Ref // the fired template, marked once the next one is stored
	tmpl []byte    // the fired template; nil: the schedule ended
	due  int64     // the next occurrence: the next template's due time
	cs   CronSchedule
	occ  *builtOccurrence // the occurrence forwarded; nil: skipped
}

// nextQueue hands the next templates from the producer's callbacks to
// recurLoop without blocking them; after close it takes none (their fired
// templates stay unmarked and fire again after the restart).
type nextQueue struct {
	mu     sync.Mutex
	items  []*nextTemplate
	closed bool
	wake   chan struct{}
}

func newNextQueue() *nextQueue { return &nextQueue{wake: make(chan struct{}, 1)} }

func (q *nextQueue) push(t *nextTemplate) {
	q.mu.Lock()
	if !q.closed {
		q.items = append(q.items, t)
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns what is queued (nil and false once closed and empty). The
// next burst's queue starts as large as this one's.
func (q *nextQueue) take() ([]*nextTemplate, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	if len(items) > 0 {
		q.items = make([]*nextTemplate, 0, len(items))
	}
	return items, len(items) > 0 || !q.closed
}

// Next templates are appended once the burst that queued them has settled:
// nothing new queued and no forward waiting for its broker's answer for
// nextTail (the burst's last occurrences are on their way to the consumers
// meanwhile), or nextLinger after the first, but never later than
// nextMargin before the earliest next occurrence. The appends, their
// replay and the marks then take no CPU from the burst's forwards, whose
// lateness is what users see. The earliest next occurrence is a second
// away ("@every" counts whole seconds).
const (
	nextQuiet  = 2 * time.Millisecond
	nextTail   = 20 * time.Millisecond
	nextLinger = 300 * time.Millisecond
	nextMargin = 300 * time.Millisecond
)

// settle adds to batch what is queued until the burst has settled: busy
// reports forwards in flight; nowMillis reads the clock the due times are
// in.
func (q *nextQueue) settle(batch []*nextTemplate, busy func() bool, nowMillis func() int64) []*nextTemplate {
	earliest := int64(math.MaxInt64)
	for _, t := range batch {
		earliest = min(earliest, t.due)
	}
	start := time.Now()
	var settled time.Time // when the queue was quiet and no forward in flight
	for {
		wait := min(nextLinger, time.Duration(earliest-nowMillis())*time.Millisecond-nextMargin)
		if time.Since(start) >= wait {
			return batch
		}
		time.Sleep(nextQuiet)
		more, open := q.take()
		for _, t := range more {
			earliest = min(earliest, t.due)
		}
		batch = append(batch, more...)
		switch {
		case !open:
			return batch
		case len(more) > 0 || busy():
			settled = time.Time{}
		case settled.IsZero():
			settled = time.Now()
		case time.Since(settled) >= nextTail:
			return batch
		}
	}
}

func (q *nextQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// recurLoop appends the next templates in batches: one Append (one group
// commit, one callback) for all the occurrences a burst of schedules
// forwarded meanwhile, off the producer's callback goroutine, which would
// otherwise check and queue each template on its own while the burst's
// other forwards wait for their answers.
func (m *master) recurLoop() {
	defer close(m.recurDone)
	for {
		batch, more := m.nexts.take()
		if !more {
			return
		}
		if len(batch) == 0 {
			<-m.nexts.wake
			continue
		}
		batch = m.nexts.settle(batch, func() bool { return m.forwarding.Load() > 0 }, func() int64 { return m.s.clk.Now().UnixMilli() })
		msgs := make([][]byte, len(batch))
		now := m.s.clk.Now()
		for i, t := range batch {
			msgs[i] = withDue(t.tmpl, t.due)
			m.built.buildNext(msgs[i], t.occ, &t.cs, now, m.s.limits)
		}
		m.appendNext(batch, msgs)
	}
}

// appendNext appends next templates (msgs[i] is batch[i]'s) and marks their
// fired ones once each is stored. The same template stored already (a
// template fired again after a crash or failover) is a duplicate; another
// message holding the schedule's name ends this chain. A failed append is
// retried a second later, unless the master is closing (the fired template
// stays unmarked and fires again after the restart).
func (m *master) appendNext(batch []*nextTemplate, msgs [][]byte) {
	m.retries.Add(1)
	m.store.Append(msgs, func(rs []store.Result) {
		defer m.retries.Done()
		var failed []*nextTemplate
		var again [][]byte
		for i, r := range rs {
			switch err := r.Err; {
			case err == nil, errors.Is(err, protocol.ErrDuplicate), errors.Is(err, protocol.ErrKeyExists):
				m.marks <- batch[i].ref
			case m.closing.Load():
			default:
				m.lg.Warn("storing a recurring schedule's next occurrence failed, retrying", zap.Stringer("ref", batch[i].ref), zap.Error(err))
				failed, again = append(failed, batch[i]), append(again, msgs[i])
			}
		}
		if len(failed) > 0 {
			m.retries.Add(1)
			time.AfterFunc(time.Second, func() { defer m.retries.Done(); m.appendNext(failed, again) })
		}
	})
}

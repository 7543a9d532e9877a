package realtime

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// liveness remembers when each consumer last pulled or acked, so consumers
// that stop (a crash, a network partition) lose their un-acked messages to
// the rest of their group after the consumer timeout. It also holds the
// consumers an admin took offline.
type liveness struct {
	mu      sync.Mutex
	seen    map[consumerKey]time.Time
	offline map[consumerKey]bool
}

type consumerKey struct {
	subject, group, consumer string
}

func newLiveness() *liveness {
	return &liveness{seen: map[consumerKey]time.Time{}, offline: map[consumerKey]bool{}}
}

func (l *liveness) touch(subject, group, consumer string) {
	l.touchAt(subject, group, consumer, time.Now())
}

// touchAt records that the consumer was seen at (a request's arrival time:
// the server read the clock already; zero: now).
func (l *liveness) touchAt(subject, group, consumer string, at time.Time) {
	if at.IsZero() {
		at = time.Now()
	}
	l.mu.Lock()
	l.seen[consumerKey{subject, group, consumer}] = at
	l.mu.Unlock()
}

func (l *liveness) forget(subject, group, consumer string) {
	l.mu.Lock()
	delete(l.seen, consumerKey{subject, group, consumer})
	l.mu.Unlock()
}

// expired removes and returns the consumers silent since before deadline.
func (l *liveness) expired(deadline time.Time) []consumerKey {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []consumerKey
	for k, at := range l.seen {
		if at.Before(deadline) {
			out = append(out, k)
			delete(l.seen, k)
		}
	}
	return out
}

func (l *liveness) setOffline(k consumerKey, off bool) {
	l.mu.Lock()
	if off {
		l.offline[k] = true
	} else {
		delete(l.offline, k)
	}
	l.mu.Unlock()
}

func (b *Broker) offline(subject, group, consumer string) bool {
	b.live.mu.Lock()
	defer b.live.mu.Unlock()
	return len(b.live.offline) > 0 && b.live.offline[consumerKey{subject, group, consumer}]
}

// reset forgets when consumers were seen (a new master term: they pull
// from this broker again or time out from then on).
func (l *liveness) reset() {
	l.mu.Lock()
	clear(l.seen)
	l.mu.Unlock()
}

// livenessLoop hands the un-acked messages of silent consumers back to
// their groups, during the master's term t.
func (b *Broker) livenessLoop(t *term) {
	defer t.wg.Done()
	tick := time.NewTicker(min(time.Second, b.opts.ConsumerTimeout/4))
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case now := <-tick.C:
			for _, k := range b.live.expired(now.Add(-b.opts.ConsumerTimeout)) {
				b.lg.Debug("consumer timed out", zap.String("subject", k.subject), zap.String("consumer_group", k.group), zap.String("consumer", k.consumer))
				b.release(k.subject, k.group, k.consumer, "consumer timed out")
			}
		}
	}
}

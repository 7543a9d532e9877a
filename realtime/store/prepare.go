package store

import (
	"sync"

	"go.uber.org/zap"
)

// A subject's consume log gets its directory and first file from
// prepareLoop, in the background, once the subject's buffer is half full
// (pendingPrepareBytes), not from the write that empties the full buffer:
// that write happens on the appender goroutine (or the replica's indexer),
// and creating a directory and a file there costs 0.1–0.2 ms (most of it
// the file system allocating inodes). Thousands of subjects growing at the
// same pace filled their buffers together and stalled every append for
// seconds (measured: a broker taking ~400k msg/s over 10,000 subjects fell
// to ~12k and ~44k msg/s for the two seconds after their buffers filled,
// its appender in mkdirat and openat). Half a buffer earlier (205 entries)
// the loop starts on them, and the write that finds its file only opens
// it. A subject that fills slowly is written first by a checkpoint, off
// the appender, as before; so is one whose turn comes late.
//
// Preparing every subject as soon as it appeared cost a fresh broker over
// 10,000 new subjects a third of its throughput for its first seconds
// (~270k msg/s against ~385k), for subjects a checkpoint would have written
// anyway; waiting for half a buffer spends the work only on subjects about
// to be written by the appender.

// pendingPrepareBytes is the buffered size at which a subject is sent to
// prepareLoop.
const pendingPrepareBytes = pendingFlushBytes / 2

// prepareIfFilling sends sj to prepareLoop once its buffer is half full;
// sj.mu is held. The length is checked first: it is on the subject's
// buffer line, which the caller just wrote.
func (s *Store) prepareIfFilling(sj *subject) {
	if len(sj.pending) >= pendingPrepareBytes && !sj.prepQueued {
		sj.prepQueued = true
		s.prep.add(sj)
	}
}

// preparer holds the subjects whose consume logs prepareLoop has yet to
// create.
type preparer struct {
	mu    sync.Mutex
	queue []*subject
	sig   chan struct{} // one slot: the queue has work
}

func newPreparer() *preparer { return &preparer{sig: make(chan struct{}, 1)} }

// add queues sj and wakes prepareLoop.
func (p *preparer) add(sj *subject) {
	p.mu.Lock()
	p.queue = append(p.queue, sj)
	p.mu.Unlock()
	select {
	case p.sig <- struct{}{}:
	default:
	}
}

// take empties the queue.
func (p *preparer) take() []*subject {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.queue
	p.queue = nil
	return q
}

// prepareLoop creates the consume-log directory and first file of each new
// subject (segment.FixedLog.Prepare) until the store closes.
func (s *Store) prepareLoop() {
	defer s.bg.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-s.prep.sig:
		}
		for _, sj := range s.prep.take() {
			select {
			case <-s.stop:
				return
			default:
			}
			if err := sj.log.Prepare(); err != nil {
				// The first write tries again, and reports what fails.
				s.lg.Warn("cannot prepare a consume log", zap.String("subject", sj.name), zap.Error(err))
			}
		}
	}
}

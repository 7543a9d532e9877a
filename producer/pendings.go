package producer

import "sync"

// pendingFree keeps pendings whose message is done for the next messages:
// completeLoop returns a request's worth at a time under one lock, and a
// message takes one under a lock that nothing else holds for long (cheaper
// than a sync.Pool's Put and Get, which were 7 % of the producer's CPU at
// 256 B: NOTES.md). A pending is cleared before it is kept, so it holds no
// message, callback or bytes of a message that is done.
type pendingFree struct {
	mu   sync.Mutex
	free []*pending
}

// maxFreePendings bounds the pendings kept (~200 B each).
const maxFreePendings = 8192

// get returns a cleared pending.
func (f *pendingFree) get() *pending {
	f.mu.Lock()
	if n := len(f.free); n > 0 {
		pd := f.free[n-1]
		f.free[n-1] = nil
		f.free = f.free[:n-1]
		f.mu.Unlock()
		return pd
	}
	f.mu.Unlock()
	return new(pending)
}

// put clears pd and keeps it.
func (f *pendingFree) put(pd *pending) {
	*pd = pending{}
	f.mu.Lock()
	if len(f.free) < maxFreePendings {
		f.free = append(f.free, pd)
	}
	f.mu.Unlock()
}

// putDone clears and keeps the pendings of done, whose callbacks have run.
func (f *pendingFree) putDone(done []completion) {
	for _, c := range done {
		*c.pd = pending{}
	}
	f.mu.Lock()
	for _, c := range done {
		if len(f.free) >= maxFreePendings {
			break
		}
		f.free = append(f.free, c.pd)
	}
	f.mu.Unlock()
}

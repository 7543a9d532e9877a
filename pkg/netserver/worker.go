package netserver

import "time"

// serveWorkerIdle is how long a serve worker waits for another connection's
// batch before it exits.
const serveWorkerIdle = time.Second

// serveConn runs c's serve loop on a parked serve worker if one waits, or
// on a new one. It runs on the event loop and never blocks it: the hand-off
// channel is unbuffered, so a send succeeds only when a worker is parked in
// its receive.
//
// A goroutine started per batch (as the server once did) began on a small
// stack and grew it again on every batch as the handler's calls went deep
// (runtime.copystack and newproc were about a tenth of the broker's CPU
// under a pull flood); a worker keeps its grown stack from batch to batch.
func (s *Server) serveConn(c *Conn) {
	select {
	case s.workers <- c:
	default:
		s.serving.Add(1)
		s.workersStarted.Add(1)
		s.workersLive.Add(1)
		go s.serveWorkerLoop(c)
	}
}

// serveWorkerLoop runs connections' serve loops, c's first, and parks in
// between; it exits after serveWorkerIdle without work, or when the server
// has stopped (Close closes workersQuit once gnet has stopped, so no more
// batches come).
func (s *Server) serveWorkerLoop(c *Conn) {
	defer s.serving.Done()
	defer s.workersLive.Add(-1)
	idle := time.NewTimer(s.workerIdle)
	defer idle.Stop()
	for {
		c.serveLoop()
		idle.Reset(s.workerIdle)
		select {
		case c = <-s.workers:
		case <-idle.C:
			return
		case <-s.workersQuit:
			return
		}
	}
}

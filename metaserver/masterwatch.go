package metaserver

import (
	"sync"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// A killed master's seat outlives it until its lease expires (BrokerTTL),
// and only the lease or a takeover may move the seat (pkg/failover). The
// meta server notices a dead master sooner: the connection the master
// registers over closes. It then pings the master (takeoverPing, as a
// takeover does); a master that does not answer is marked unreachable in
// this meta server's view, and its group shows "unavailable" in the admin
// API, qmqctl and the console within a second or so of the connection
// closing instead of up to BrokerTTL later. Lookups and route assignment do
// not use the mark (view.adminStateLocked): producers learn of a dead
// master from their own failed sends, and a master the meta server cannot
// reach may still serve its clients. The mark is pinged
// away every second: it ends when the master answers, registers again, or
// leaves its seat. It changes no etcd record and decides no election.

// masterWatch follows the connection each group's master last registered
// over (the channel netserver closes with the connection).
type masterWatch struct {
	mu    sync.Mutex
	conns map[string]<-chan struct{} // group → its master's registration connection
}

// watchMasterConn follows the connection a master's registration came over
// (done closes with it); a registration over the connection already
// followed changes nothing.
func (s *Server) watchMasterConn(group, brokerID, addr string, done <-chan struct{}) {
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	if s.loopCtx.Err() != nil {
		return // closing: Close waits for the loops already started
	}
	if s.watch.conns == nil {
		s.watch.conns = map[string]<-chan struct{}{}
	}
	if s.watch.conns[group] == done {
		return
	}
	s.watch.conns[group] = done
	s.view.setUnreachable(group, brokerID, false) // it just registered
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		s.masterConnLoop(group, brokerID, addr, done)
	}()
}

// stopLoops ends the server's loops; no watch starts after it.
func (s *Server) stopLoops() {
	s.watch.mu.Lock()
	s.stop()
	s.watch.mu.Unlock()
}

// masterConnLoop waits for the master's connection to close, then pings
// the master every second while it holds its seat, no newer connection of
// it is followed, and it does not answer.
func (s *Server) masterConnLoop(group, brokerID, addr string, done <-chan struct{}) {
	select {
	case <-done:
	case <-s.loopCtx.Done():
		return
	}
	current := func() bool {
		s.watch.mu.Lock()
		defer s.watch.mu.Unlock()
		return s.watch.conns[group] == done
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for current() && s.masterSeated(group, brokerID) {
		answers := s.answers(s.loopCtx, addr)
		if s.loopCtx.Err() != nil {
			return
		}
		s.view.setUnreachable(group, brokerID, !answers)
		if answers {
			return // alive: its next registration is followed anew
		}
		select {
		case <-tick.C:
		case <-s.loopCtx.Done():
			return
		}
	}
	s.view.setUnreachable(group, brokerID, false)
}

// masterSeated reports whether brokerID holds group's master seat.
func (s *Server) masterSeated(group, brokerID string) bool {
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	e, ok := s.view.brokers[brokerKey{group, protocol.RoleMaster}]
	return ok && e.rec.BrokerID == brokerID
}

// setUnreachable marks (or clears) group's master brokerID as not
// answering; adminStateLocked shows such a group unavailable.
func (v *view) setUnreachable(group, brokerID string, down bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	cur, marked := v.unreachable[group]
	switch {
	case down && cur != brokerID:
		if v.unreachable == nil {
			v.unreachable = map[string]string{}
		}
		v.unreachable[group] = brokerID
		v.lg.Warn("master does not answer since its connection closed: its group shows unavailable until it answers or its lease expires",
			zap.String("group", group), zap.String("broker", brokerID))
	case !down && marked && cur == brokerID:
		delete(v.unreachable, group)
		v.lg.Info("master answers again", zap.String("group", group), zap.String("broker", brokerID))
	}
}

package delay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/failover"
	"github.com/qmq-go/qmq/pkg/protocol"
	"go.uber.org/zap"
)

// The Server is the failover.Server of its group's role loop (pkg/failover
// runs it with meta servers): Promote and Demote swap its master and slave
// objects, the rest reports its replication to the loop and acts on it.
var _ failover.Server = (*Server)(nil)

// Promote turns the slave into the master the election made it
// (failover.Server): copying has stopped (StopCopy), the copy becomes a
// master's store, and the master starts at epoch.
func (s *Server) Promote(epoch uint64) error {
	s.roleMu.Lock()
	defer s.roleMu.Unlock()
	_, sl := s.current()
	if sl == nil {
		return errors.New("delay: promote: not a slave")
	}
	sl.stop()
	if err := sl.replica.Promote(); err != nil {
		return fmt.Errorf("delay: promote the copy: %w", err)
	}
	s.mu.Lock()
	s.slave = nil
	s.mu.Unlock()
	m, err := openMaster(s)
	if err != nil {
		s.lg.Error("cannot open the promoted store; copying again", zap.Error(err))
		s.reopenSlave()
		return err
	}
	m.epoch.Store(epoch)
	s.mu.Lock()
	s.master = m
	s.mu.Unlock()
	m.start()
	st := m.store.Stats()
	s.lg.Info("serving as the group's master", zap.Uint64("epoch", epoch), zap.Int64("pending", st.Pending))
	return nil
}

// NewEpoch records the master's epoch (failover.Server).
func (s *Server) NewEpoch(epoch uint64) error {
	if m, _ := s.current(); m != nil {
		m.epoch.Store(epoch)
	}
	return nil
}

// Demote closes the master (no sends, no forwards: the gate refuses them
// already; the replies waiting for the slave fail) and reopens the data
// directory as a slave's copy (failover.Server): its first sync keeps what
// it shares with the new master's store and copies the rest.
func (s *Server) Demote() error {
	s.roleMu.Lock()
	defer s.roleMu.Unlock()
	m, _ := s.current()
	if m == nil {
		return nil
	}
	s.mu.Lock()
	s.master = nil
	s.mu.Unlock()
	m.src.failWaiting(protocol.Errorf(protocol.StatusNotMaster, "delay group "+s.opts.Group+
		": this master was replaced before its slave confirmed the messages (stored on the old master only)"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	if err := m.close(ctx); err != nil {
		s.lg.Warn("closing the deposed master", zap.Error(err))
	}
	cancel()
	// A master that won its group as a slave stopped its copy for the
	// campaign; demoted, it copies again (failover.Server.Demote).
	s.copyStopped = false
	s.reopenSlave()
	return nil
}

// reopenSlave opens the data directory as a slave's copy and starts
// copying (unless a campaign stopped the copy); roleMu is held. It gives
// up after reopenAttempts (the server then has no role: a broken data
// directory needs an operator).
func (s *Server) reopenSlave() {
	for attempt := 1; ; attempt++ {
		sl, err := openSlave(s)
		if err == nil {
			s.mu.Lock()
			s.slave = sl
			s.mu.Unlock()
			if !s.copyStopped {
				sl.start()
			}
			return
		}
		s.lg.Error("cannot open the data directory as a slave's copy; retrying", zap.Error(err), zap.Int("attempt", attempt))
		if attempt == reopenAttempts {
			return
		}
		select {
		case <-s.stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// reopenAttempts bounds reopenSlave.
const reopenAttempts = 10

// Load is what heartbeats report (failover.Server).
func (s *Server) Load() protocol.BrokerLoad {
	_, load := s.report()
	return load
}

// Slave reports the slave copying from this master (failover.Server):
// Acked and End are replay positions of the message log.
func (s *Server) Slave() failover.SlaveStatus {
	m, _ := s.current()
	if m == nil {
		return failover.SlaveStatus{}
	}
	id, connected, lease := m.src.slaves.Status()
	_, lag := m.src.lag()
	return failover.SlaveStatus{ID: id, Connected: connected, Acked: m.src.acked.Load(), End: m.store.LogEnd(), Lag: lag, LeaseUntil: lease}
}

// WaitSlave makes send replies wait for the slave or not (failover.Server).
func (s *Server) WaitSlave(on bool) int64 {
	if m, _ := s.current(); m != nil {
		return m.src.setWait(on)
	}
	return 0
}

// FailWaiting fails the replies waiting for the slave (failover.Server).
func (s *Server) FailWaiting(err error) {
	if m, _ := s.current(); m != nil {
		m.src.failWaiting(err)
	}
}

// HandOver waits until the slave's copy holds every hour file at its
// current size and has acknowledged the whole message log
// (failover.Server; sends and forwards are stopped by the gate).
func (s *Server) HandOver(ctx context.Context) error {
	m, _ := s.current()
	if m == nil {
		return protocol.Errorf(protocol.StatusNotMaster, "delay group "+s.opts.Group+": not a master")
	}
	for !m.src.slaveHoldsAll() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("delay group %s: the slave does not hold everything: %w", s.opts.Group, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// Copy reports the slave's copy (failover.Server).
func (s *Server) Copy() failover.CopyStatus {
	heard, asked, failing := s.copyWatch.Status()
	return failover.CopyStatus{Master: s.following(), Epoch: s.masterEpoch(), Heard: heard, Asked: asked, Failing: failing}
}

// masterEpoch is the epoch of the group's master as the meta servers name
// it (a slave's requests carry it; 0: none known).
func (s *Server) masterEpoch() uint64 {
	if s.member.Load() != nil && !s.member.Load().Master() {
		return s.member.Load().Epoch()
	}
	return 0
}

// StopCopy stops the slave's copy (failover.Server).
func (s *Server) StopCopy() {
	s.roleMu.Lock()
	defer s.roleMu.Unlock()
	s.copyStopped = true
	if _, sl := s.current(); sl != nil {
		sl.stop()
	}
}

// StartCopy copies again (failover.Server).
func (s *Server) StartCopy() {
	s.roleMu.Lock()
	defer s.roleMu.Unlock()
	s.copyStopped = false
	if _, sl := s.current(); sl != nil {
		sl.start()
	}
}

// following is the address of the master a slave copies from: the fixed
// Options.Master, or the group's master as the meta servers name it.
func (s *Server) following() string {
	if s.opts.Master != "" {
		return s.opts.Master
	}
	if s.member.Load() != nil {
		return s.member.Load().Following()
	}
	return ""
}

// report is what every heartbeat tells the meta servers: the state
// (readonly for a slave, a master whose gate is closed, or one whose slave
// lags under WaitSlave without a role loop) and the load, with the
// replication lag.
func (s *Server) report() (protocol.GroupState, protocol.BrokerLoad) {
	m, sl := s.current()
	switch {
	case m != nil:
		st := m.store.Stats()
		in, out := s.metrics.rates.Update(int64(st.Appended), int64(st.Dispatched))
		b, d := m.src.lag()
		load := protocol.BrokerLoad{InPerSec: in, OutPerSec: out, StoredBytes: uint64(max(st.WALWritten, 0)),
			Pending: uint64(max(st.Pending, 0)), ReplicaLagBytes: uint64(max(b, 0)), ReplicaLagMillis: uint64(d.Milliseconds())}
		if m.src.acked.Load() < 0 {
			load.ReplicaLagBytes, load.ReplicaLagMillis = 0, 0 // no slave
		}
		if m.src.readonly.Load() || !s.gate.Open() {
			return protocol.GroupReadonly, load
		}
		return protocol.GroupReadWrite, load
	case sl != nil:
		b, d := sl.lag()
		return protocol.GroupReadonly, protocol.BrokerLoad{Pending: uint64(max(sl.replica.Pending(), 0)),
			ReplicaLagBytes: uint64(max(b, 0)), ReplicaLagMillis: uint64(d.Milliseconds())}
	}
	return protocol.GroupReadonly, protocol.BrokerLoad{}
}

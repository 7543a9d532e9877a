package realtime

import (
	"time"

	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// register keeps the broker registered with the meta servers (when it has
// any), reporting its state and load with every heartbeat. A Node
// registers the brokers it manages itself (node.go).
func (b *Broker) register() {
	if len(b.opts.MetaServers) == 0 {
		return
	}
	role := protocol.RoleMaster
	if b.opts.Role == RoleSlave {
		role = protocol.RoleSlave
	}
	b.keeper = metaclient.Keep(b.opts.MetaServers, metaclient.Broker{
		Kind: protocol.KindRealtime, Role: role, Group: b.opts.Group, Address: b.advertised(),
		Report: b.report,
	}, b.lg, metaclient.WithRequestTimeout(2*time.Second))
}

// advertised is the address registered with the meta servers.
func (b *Broker) advertised() string {
	if b.opts.AdvertiseAddr != "" {
		return b.opts.AdvertiseAddr
	}
	return b.server.Addr().String()
}

// report is the state and load a heartbeat carries.
func (b *Broker) report() (protocol.GroupState, protocol.BrokerLoad) {
	state := protocol.GroupReadWrite
	if b.readonly.Load() || b.sync == nil || b.sync.readonly.Load() || b.fenced() != nil {
		// A slave takes no messages; a master whose slave lags past the
		// --wait-slave threshold takes none until it catches up.
		state = protocol.GroupReadonly
	}
	st := b.store.Stats()
	in, out := b.rates.Update(st.Appended, st.Pulled)
	load := protocol.BrokerLoad{InPerSec: in, OutPerSec: out, Subjects: uint32(len(st.Subjects)),
		StoredBytes: uint64(max(st.MessageLogEnd-st.MessageLogStart, 0))}
	switch {
	case b.sync != nil && b.sync.slaveMsg.Load() >= 0:
		// A master: its slave's lag (0 when no slave is connected).
		load.ReplicaLagBytes = uint64(max(b.sync.lagBytes.Load(), 0))
		load.ReplicaLagMillis = uint64(max(b.sync.lagNanos.Load(), 0) / int64(time.Millisecond))
	case b.replica != nil:
		lag, d := b.replica.lag()
		load.ReplicaLagBytes, load.ReplicaLagMillis = uint64(max(lag, 0)), uint64(d.Milliseconds())
	}
	return state, load
}

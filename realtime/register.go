package realtime

import (
	"time"

	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// register keeps a slave with a fixed master (Options.Master) registered
// with the meta servers, when it has any, reporting its state and load
// with every heartbeat. Every other broker with meta servers is registered
// by its role loop (pkg/failover).
func (b *Broker) register() {
	if len(b.opts.MetaServers) == 0 {
		return
	}
	b.keeper = metaclient.Keep(b.opts.MetaServers, metaclient.Broker{
		Kind: protocol.KindRealtime, Role: protocol.RoleSlave, Group: b.opts.Group, Address: b.advertised(),
		Report: b.report,
	}, b.lg, append(b.kit.Meta(), metaclient.WithRequestTimeout(2*time.Second))...)
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
	t := b.cur()
	state := protocol.GroupReadWrite
	if b.readonly.Load() || t.sync == nil || t.sync.readonly.Load() || !b.gate.Open() {
		// A slave takes no messages; a master whose gate is closed
		// (readonly for its slave, fenced, deposed, handing over) takes
		// none until it opens.
		state = protocol.GroupReadonly
	}
	st := t.store.Stats()
	in, out := b.rates.Update(st.Appended, st.Pulled)
	b.subjRates.update(&st)
	load := protocol.BrokerLoad{InPerSec: in, OutPerSec: out, Subjects: uint32(len(st.Subjects)),
		StoredBytes: uint64(max(st.MessageLogEnd-st.MessageLogStart, 0))}
	switch {
	case t.sync != nil && t.sync.slaveMsg.Load() >= 0:
		// A master: its slave's lag (0 when no slave is connected).
		load.ReplicaLagBytes = uint64(max(t.sync.lagBytes.Load(), 0))
		load.ReplicaLagMillis = uint64(max(t.sync.lagNanos.Load(), 0) / int64(time.Millisecond))
	case t.replica != nil:
		lag, d := t.replica.lag()
		load.ReplicaLagBytes, load.ReplicaLagMillis = uint64(max(lag, 0)), uint64(d.Milliseconds())
	}
	return state, load
}

package realtime

import (
	"time"

	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// register keeps the broker registered with the meta servers (when it has
// any), reporting its state and load with every heartbeat.
func (b *Broker) register() {
	if len(b.opts.MetaServers) == 0 {
		return
	}
	addr := b.opts.AdvertiseAddr
	if addr == "" {
		addr = b.server.Addr().String()
	}
	rates := &metaclient.Rates{}
	role := protocol.RoleMaster
	if b.opts.Role == RoleSlave {
		role = protocol.RoleSlave
	}
	b.keeper = metaclient.Keep(b.opts.MetaServers, metaclient.Broker{
		Kind: protocol.KindRealtime, Role: role, Group: b.opts.Group, Address: addr,
		Report: func() (protocol.GroupState, protocol.BrokerLoad) {
			state := protocol.GroupReadWrite
			if b.readonly.Load() || b.sync == nil || b.sync.readonly.Load() {
				// A slave takes no messages; a master whose slave lags past
				// the --wait-slave threshold takes none until it catches up.
				state = protocol.GroupReadonly
			}
			st := b.store.Stats()
			in, out := rates.Update(st.Appended, st.Pulled)
			return state, protocol.BrokerLoad{InPerSec: in, OutPerSec: out, Subjects: uint32(len(st.Subjects)),
				StoredBytes: uint64(max(st.MessageLogEnd-st.MessageLogStart, 0))}
		},
	}, b.lg, metaclient.WithRequestTimeout(2*time.Second))
}

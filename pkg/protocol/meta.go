package protocol

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Meta server bodies: broker registration (CmdRegister), route lookups
// (CmdLookup) and consumer heartbeats (CmdClientHeartbeat). All integers are
// big-endian; s8 is a u8 length and that many bytes, s16 a u16 length and
// that many bytes (subjects are s16 because system subjects can pass 255
// bytes).
//
// RegisterRequest (broker → meta server, every heartbeat interval):
//
//	flags u8 | kind u8 | role u8 | state u8 | group s8 | broker id s8 |
//	address s8 | lease id i64 | in/s u32 | out/s u32 | subjects u32 |
//	stored bytes u64 | pending u64 | replica lag bytes u64 |
//	replica lag ms u64 | epoch u64 | write state u8 | write reason s8
//
// flags bit0 (RegisterLeaving) removes the registration at once (a clean
// shutdown; a master that has an eligible slave releases the group to it,
// see pkg/failover). bit1 (RegisterTakeover) asks, on a master
// registration, for a takeover: the eligible slave of a group whose
// eligible set is in sync mode takes the group from a master that does not
// answer, without waiting for that master's lease (epoch is then the
// master epoch the slave follows). bit2 (RegisterSync) says a master runs
// --wait-slave: its eligible set is in sync mode. lease id is the one the last response returned (0 the first
// time); any meta server can keep it alive. state is what the broker reports
// of itself: GroupReadWrite, or GroupReadonly when it wants no new messages
// (a lagging slave, a full disk). replica lag is, on a slave, how far its
// logs are behind its master; on a master, how far its slave is behind (0
// without one). epoch is the epoch the broker serves in: a master's own, a
// slave's master's (0: none yet). write state is a master's WriteState
// (0 unknown, and for a slave) and write reason why, for people.
//
// RegisterResponse:
//
//	lease id i64 | ttl ms u32 | version u64 | master s8 | epoch u64 |
//	flags u8 | eligible slave s8
//
// flags and eligible slave describe the group's eligible set (the meta
// server's record of which slave may take the group over): bit0
// (RegisterEligible) this broker is the eligible slave, bit1
// (RegisterSyncSet) the set is in sync mode, bit2 (RegisterHasSet) the group
// has a record at all, bit3 (RegisterReleased) the set's master released
// the group to its slave (a switchover or a clean shutdown: the slave may
// take it at once), bit4 (RegisterOwnSet) the set belongs to this broker
// (its master: it may take its seat again); eligible slave is the recorded
// slave's broker id ("" none).
//
// master is the address of the group's live master as the meta server
// knows it (empty when none): what a slave replicates from. epoch is that
// master's epoch: the etcd create revision of the group's master
// registration, so every election gives a larger one and heartbeats keep
// it (0 when the group has no master).
//
// Election: registering as RoleMaster succeeds only while no other broker
// holds the group's master registration, and only for a broker the group's
// eligible set allows (CmdEligible, eligible.go: its master, or its eligible
// slave when the master released the group or does not answer); otherwise
// it fails with StatusNotMaster naming why. A takeover (RegisterTakeover)
// moves a held registration to the eligible slave of a sync-mode set when
// the master does not answer. The lease the registration lives on is the
// master's: a master whose lease expired may win its seat again at a new
// epoch (pkg/failover has the rules and why they are safe).
//
// LookupRequest (client → meta server):
//
//	client type u8 | subject s16 | group s8 | client id s8 |
//	wait ms u32 | known u64
//
// wait > 0 makes the lookup a long poll: the meta server answers as soon as
// the answer's RouteHash differs from known (the client's cached answer),
// or after wait with the current answer.
//
// LookupResponse:
//
//	version u64 | timestamp ms i64 | flags u8 | count u16 |
//	count × (group s8 | kind u8 | state u8 | master s8 | slave s8 |
//	epoch u64)
//
// epoch is the master's (requests to it carry it: SendRequest.Epoch).
// version is the etcd revision the meta server's view was at; clients keep
// the response with the highest version and ignore older ones. flags bit0
// (LookupConsumerOffline) says an admin took this consumer offline. Each
// group's state is the one this client type must respect: a group marked
// readonly for the subject shows GroupReadonly.
//
// ClientHeartbeatRequest (consumer → meta server):
//
//	flags u8 | client type u8 | subject s16 | group s8 | client id s8 |
//	lease id i64
//
// flags bit0 (ClientLeaving) unregisters the consumer.
//
// ClientHeartbeatResponse:
//
//	lease id i64 | ttl ms u32 | flags u8
//
// flags bit0 (LookupConsumerOffline): an admin took the consumer offline.

// ClientType says who asks the meta server for a route.
type ClientType uint8

const (
	// ClientProducer sends realtime messages.
	ClientProducer ClientType = 1
	// ClientConsumer pulls messages.
	ClientConsumer ClientType = 2
	// ClientDelayProducer sends delayed messages (routed to delay groups).
	ClientDelayProducer ClientType = 3
)

// String returns "producer", "consumer" or "delay-producer".
func (c ClientType) String() string {
	switch c {
	case ClientProducer:
		return "producer"
	case ClientConsumer:
		return "consumer"
	case ClientDelayProducer:
		return "delay-producer"
	}
	return fmt.Sprintf("client-type(%d)", uint8(c))
}

// BrokerKind says what a broker group stores.
type BrokerKind uint8

const (
	// KindRealtime groups store and serve realtime messages.
	KindRealtime BrokerKind = 1
	// KindDelay groups hold delayed messages until they are due.
	KindDelay BrokerKind = 2
)

// String returns "realtime" or "delay".
func (k BrokerKind) String() string {
	switch k {
	case KindRealtime:
		return "realtime"
	case KindDelay:
		return "delay"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// BrokerRole is a broker's role in its group.
type BrokerRole uint8

const (
	// RoleMaster takes writes and serves pulls.
	RoleMaster BrokerRole = 1
	// RoleSlave replicates the master.
	RoleSlave BrokerRole = 2
)

// String returns "master" or "slave".
func (r BrokerRole) String() string {
	switch r {
	case RoleMaster:
		return "master"
	case RoleSlave:
		return "slave"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// GroupState is a broker group's state as clients must respect it.
type GroupState uint8

const (
	// GroupReadWrite takes new messages and serves pulls.
	GroupReadWrite GroupState = 1
	// GroupReadonly serves pulls but takes no new messages (marked by an
	// admin, or reported by the broker itself).
	GroupReadonly GroupState = 2
	// GroupUnavailable has no live master.
	GroupUnavailable GroupState = 3
)

// String returns "rw", "readonly" or "unavailable".
func (s GroupState) String() string {
	switch s {
	case GroupReadWrite:
		return "rw"
	case GroupReadonly:
		return "readonly"
	case GroupUnavailable:
		return "unavailable"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Writable reports whether producers may send to a group in state s.
func (s GroupState) Writable() bool { return s == GroupReadWrite }

// Readable reports whether consumers may pull from a group in state s.
func (s GroupState) Readable() bool { return s == GroupReadWrite || s == GroupReadonly }

// Flags of meta bodies.
const (
	// RegisterLeaving in RegisterRequest.Flags removes the registration.
	RegisterLeaving uint8 = 1 << 0
	// ClientLeaving in ClientHeartbeatRequest.Flags unregisters the consumer.
	ClientLeaving uint8 = 1 << 0
	// LookupConsumerOffline in LookupResponse.Flags and
	// ClientHeartbeatResponse.Flags: an admin took the consumer offline.
	LookupConsumerOffline uint8 = 1 << 0
	// RegisterTakeover in RegisterRequest.Flags: the eligible slave takes
	// the group over from a master that does not answer (sync mode).
	RegisterTakeover uint8 = 1 << 1
	// RegisterSync in RegisterRequest.Flags: the master waits for its
	// slave (--wait-slave): its eligible set is in sync mode.
	RegisterSync uint8 = 1 << 2
	// RegisterEligible in RegisterResponse.Flags: this broker is its
	// group's eligible slave.
	RegisterEligible uint8 = 1 << 0
	// RegisterSyncSet in RegisterResponse.Flags: the group's eligible set
	// is in sync mode.
	RegisterSyncSet uint8 = 1 << 1
	// RegisterHasSet in RegisterResponse.Flags: the group has an eligible
	// set record.
	RegisterHasSet uint8 = 1 << 2
	// RegisterReleased in RegisterResponse.Flags: the set's master released
	// the group to its eligible slave.
	RegisterReleased uint8 = 1 << 3
	// RegisterOwnSet in RegisterResponse.Flags: the set belongs to this
	// broker (it is the set's master).
	RegisterOwnSet uint8 = 1 << 4
)

// WriteState is a master's write state as it reports it (pkg/failover
// computes it; heartbeats carry it to the meta server).
type WriteState uint8

const (
	// WriteUnknown: not reported (a slave, or an older broker).
	WriteUnknown WriteState = 0
	// WriteWritable: takes and acknowledges writes; an eligible slave holds
	// them (sync) or a lease covers them (async).
	WriteWritable WriteState = 1
	// WriteAlone: takes writes with no eligible slave: nobody else can be
	// elected, so it never fences itself.
	WriteAlone WriteState = 2
	// WriteReadonly: refuses writes: its eligible slave is gone and the
	// eligible set cannot be shrunk (or the policy is readonly).
	WriteReadonly WriteState = 3
	// WriteFenced: refuses writes: not registered yet, or (async) neither
	// its meta lease nor its slave lease holds.
	WriteFenced WriteState = 4
	// WriteDeposed: another broker is the group's master.
	WriteDeposed WriteState = 5
	// WriteHandingOver: a switchover stopped writes.
	WriteHandingOver WriteState = 6
)

// String returns the state's name: "writable", "alone", "readonly",
// "fenced", "deposed", "handing-over" or "" for WriteUnknown.
func (s WriteState) String() string {
	switch s {
	case WriteUnknown:
		return ""
	case WriteWritable:
		return "writable"
	case WriteAlone:
		return "alone"
	case WriteReadonly:
		return "readonly"
	case WriteFenced:
		return "fenced"
	case WriteDeposed:
		return "deposed"
	case WriteHandingOver:
		return "handing-over"
	}
	return fmt.Sprintf("write-state(%d)", uint8(s))
}

// Writes reports whether a master in state s takes writes.
func (s WriteState) Writes() bool { return s == WriteWritable || s == WriteAlone }

// BrokerLoad is what a broker reports of its load with every heartbeat.
type BrokerLoad struct {
	InPerSec    uint32 // messages stored per second, recent average
	OutPerSec   uint32 // messages delivered per second, recent average
	Subjects    uint32 // subjects the broker holds
	StoredBytes uint64 // bytes of message log on disk
	Pending     uint64 // delay groups: messages stored and not yet forwarded
	// ReplicaLagBytes and ReplicaLagMillis: on a slave, how far its logs
	// are behind its master; on a master, how far its slave is (0 without
	// one).
	ReplicaLagBytes  uint64
	ReplicaLagMillis uint64
}

// RegisterRequest registers a broker or heartbeats it.
type RegisterRequest struct {
	Flags    uint8
	Kind     BrokerKind
	Role     BrokerRole
	State    GroupState
	Group    string
	BrokerID string
	Address  string
	LeaseID  int64
	Load     BrokerLoad
	Epoch    uint64 // a master's own epoch; a slave's master's (0: none)
	// WriteState and WriteReason: a master's write state and why.
	WriteState  WriteState
	WriteReason string
}

// AppendRegisterRequest appends the body of r.
func AppendRegisterRequest(dst []byte, r *RegisterRequest) []byte {
	dst = append(dst, r.Flags, uint8(r.Kind), uint8(r.Role), uint8(r.State))
	dst = appendString8(dst, r.Group)
	dst = appendString8(dst, r.BrokerID)
	dst = appendString8(dst, r.Address)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.LeaseID))
	dst = binary.BigEndian.AppendUint32(dst, r.Load.InPerSec)
	dst = binary.BigEndian.AppendUint32(dst, r.Load.OutPerSec)
	dst = binary.BigEndian.AppendUint32(dst, r.Load.Subjects)
	dst = binary.BigEndian.AppendUint64(dst, r.Load.StoredBytes)
	dst = binary.BigEndian.AppendUint64(dst, r.Load.Pending)
	dst = binary.BigEndian.AppendUint64(dst, r.Load.ReplicaLagBytes)
	dst = binary.BigEndian.AppendUint64(dst, r.Load.ReplicaLagMillis)
	dst = binary.BigEndian.AppendUint64(dst, r.Epoch)
	dst = append(dst, uint8(r.WriteState))
	return appendString8(dst, truncate255(r.WriteReason))
}

// truncate255 cuts s to what an s8 holds.
func truncate255(s string) string {
	if len(s) > 255 {
		return s[:255]
	}
	return s
}

// DecodeRegisterRequest decodes a register request body.
func DecodeRegisterRequest(body []byte) (RegisterRequest, error) {
	r := reader{b: body}
	q := RegisterRequest{Flags: r.u8(), Kind: BrokerKind(r.u8()), Role: BrokerRole(r.u8()), State: GroupState(r.u8())}
	q.Group = r.string8()
	q.BrokerID = r.string8()
	q.Address = r.string8()
	q.LeaseID = int64(r.u64())
	q.Load = BrokerLoad{InPerSec: r.u32(), OutPerSec: r.u32(), Subjects: r.u32(), StoredBytes: r.u64(), Pending: r.u64(),
		ReplicaLagBytes: r.u64(), ReplicaLagMillis: r.u64()}
	q.Epoch = r.u64()
	q.WriteState = WriteState(r.u8())
	q.WriteReason = r.string8()
	if err := r.done(); err != nil {
		return RegisterRequest{}, fmt.Errorf("%w: register request", err)
	}
	return q, nil
}

// RegisterResponse tells a broker the lease its registration lives on.
type RegisterResponse struct {
	LeaseID int64
	TTL     time.Duration
	Version uint64
	Master  string // the group's live master's address; empty when none
	Epoch   uint64 // that master's epoch; 0 when none
	// Flags (RegisterEligible, RegisterSyncSet, RegisterHasSet) and
	// EligibleSlave describe the group's eligible set.
	Flags         uint8
	EligibleSlave string
}

// AppendRegisterResponse appends the body of r.
func AppendRegisterResponse(dst []byte, r *RegisterResponse) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.LeaseID))
	dst = binary.BigEndian.AppendUint32(dst, durationMillis(r.TTL))
	dst = binary.BigEndian.AppendUint64(dst, r.Version)
	dst = appendString8(dst, r.Master)
	dst = binary.BigEndian.AppendUint64(dst, r.Epoch)
	dst = append(dst, r.Flags)
	return appendString8(dst, r.EligibleSlave)
}

// DecodeRegisterResponse decodes a register response body.
func DecodeRegisterResponse(body []byte) (RegisterResponse, error) {
	r := reader{b: body}
	q := RegisterResponse{LeaseID: int64(r.u64())}
	q.TTL = time.Duration(r.u32()) * time.Millisecond
	q.Version = r.u64()
	q.Master = r.string8()
	q.Epoch = r.u64()
	q.Flags = r.u8()
	q.EligibleSlave = r.string8()
	if err := r.done(); err != nil {
		return RegisterResponse{}, fmt.Errorf("%w: register response", err)
	}
	return q, nil
}

// LookupRequest asks for the broker groups of a subject.
type LookupRequest struct {
	ClientType ClientType
	Subject    string
	Group      string // consumer group; empty for producers
	ClientID   string
	// Wait > 0 makes the lookup a long poll: answered once the answer's
	// RouteHash differs from Known, or after Wait.
	Wait  time.Duration
	Known uint64
}

// AppendLookupRequest appends the body of r.
func AppendLookupRequest(dst []byte, r *LookupRequest) []byte {
	dst = append(dst, uint8(r.ClientType))
	dst = appendString16(dst, r.Subject)
	dst = appendString8(dst, r.Group)
	dst = appendString8(dst, r.ClientID)
	dst = binary.BigEndian.AppendUint32(dst, durationMillis(r.Wait))
	return binary.BigEndian.AppendUint64(dst, r.Known)
}

// DecodeLookupRequest decodes a lookup request body.
func DecodeLookupRequest(body []byte) (LookupRequest, error) {
	r := reader{b: body}
	q := LookupRequest{ClientType: ClientType(r.u8())}
	q.Subject = string(r.bytes16())
	q.Group = r.string8()
	q.ClientID = r.string8()
	q.Wait = time.Duration(r.u32()) * time.Millisecond
	q.Known = r.u64()
	if err := r.done(); err != nil {
		return LookupRequest{}, fmt.Errorf("%w: lookup request", err)
	}
	return q, nil
}

// RouteGroup is one broker group of a route.
type RouteGroup struct {
	Group  string
	Kind   BrokerKind
	State  GroupState
	Master string // master's client address; empty when none is alive
	Slave  string // slave's address; empty when none
	Epoch  uint64 // the master's epoch; 0 when none is alive
}

// LookupResponse is a subject's route as one client type sees it.
type LookupResponse struct {
	Version   uint64
	Timestamp time.Time
	Flags     uint8
	Groups    []RouteGroup
}

// routeGroupMinSize is the smallest encoding of a RouteGroup.
const routeGroupMinSize = 13

// AppendLookupResponse appends the body of r.
func AppendLookupResponse(dst []byte, r *LookupResponse) []byte {
	dst = binary.BigEndian.AppendUint64(dst, r.Version)
	dst = binary.BigEndian.AppendUint64(dst, uint64(unixMillis(r.Timestamp)))
	dst = append(dst, r.Flags)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(r.Groups)))
	for i := range r.Groups {
		g := &r.Groups[i]
		dst = appendString8(dst, g.Group)
		dst = append(dst, uint8(g.Kind), uint8(g.State))
		dst = appendString8(dst, g.Master)
		dst = appendString8(dst, g.Slave)
		dst = binary.BigEndian.AppendUint64(dst, g.Epoch)
	}
	return dst
}

// DecodeLookupResponse decodes a lookup response body.
func DecodeLookupResponse(body []byte) (LookupResponse, error) {
	r := reader{b: body}
	q := LookupResponse{Version: r.u64()}
	q.Timestamp = fromMillis(int64(r.u64()))
	q.Flags = r.u8()
	n := int(r.u16())
	if r.err == nil && n*routeGroupMinSize > len(body)-r.off {
		return LookupResponse{}, fmt.Errorf("%w: lookup response claims %d groups in %d bytes", ErrTruncated, n, len(body))
	}
	if n > 0 {
		q.Groups = make([]RouteGroup, 0, n)
	}
	for i := 0; i < n && r.err == nil; i++ {
		g := RouteGroup{Group: r.string8()}
		g.Kind = BrokerKind(r.u8())
		g.State = GroupState(r.u8())
		g.Master = r.string8()
		g.Slave = r.string8()
		g.Epoch = r.u64()
		q.Groups = append(q.Groups, g)
	}
	if err := r.done(); err != nil {
		return LookupResponse{}, fmt.Errorf("%w: lookup response", err)
	}
	return q, nil
}

// RouteHash summarizes what a lookup answer tells a client (its flags and
// groups, not its version or time): a long-polling lookup is answered when
// it changes. FNV-1a over the encoded groups.
func RouteHash(r *LookupResponse) uint64 {
	h := uint64(14695981039346656037)
	add := func(c byte) {
		h ^= uint64(c)
		h *= 1099511628211
	}
	addString := func(s string) {
		for i := 0; i < len(s); i++ {
			add(s[i])
		}
		add(0)
	}
	add(r.Flags)
	for i := range r.Groups {
		g := &r.Groups[i]
		addString(g.Group)
		add(uint8(g.Kind))
		add(uint8(g.State))
		addString(g.Master)
		addString(g.Slave)
		for shift := 56; shift >= 0; shift -= 8 {
			add(byte(g.Epoch >> shift))
		}
	}
	return h
}

// ClientHeartbeatRequest keeps a consumer registered.
type ClientHeartbeatRequest struct {
	Flags      uint8
	ClientType ClientType
	Subject    string
	Group      string
	ClientID   string
	LeaseID    int64
}

// AppendClientHeartbeatRequest appends the body of r.
func AppendClientHeartbeatRequest(dst []byte, r *ClientHeartbeatRequest) []byte {
	dst = append(dst, r.Flags, uint8(r.ClientType))
	dst = appendString16(dst, r.Subject)
	dst = appendString8(dst, r.Group)
	dst = appendString8(dst, r.ClientID)
	return binary.BigEndian.AppendUint64(dst, uint64(r.LeaseID))
}

// DecodeClientHeartbeatRequest decodes a client heartbeat request body.
func DecodeClientHeartbeatRequest(body []byte) (ClientHeartbeatRequest, error) {
	r := reader{b: body}
	q := ClientHeartbeatRequest{Flags: r.u8(), ClientType: ClientType(r.u8())}
	q.Subject = string(r.bytes16())
	q.Group = r.string8()
	q.ClientID = r.string8()
	q.LeaseID = int64(r.u64())
	if err := r.done(); err != nil {
		return ClientHeartbeatRequest{}, fmt.Errorf("%w: client heartbeat request", err)
	}
	return q, nil
}

// ClientHeartbeatResponse answers a consumer heartbeat.
type ClientHeartbeatResponse struct {
	LeaseID int64
	TTL     time.Duration
	Flags   uint8
}

// AppendClientHeartbeatResponse appends the body of r.
func AppendClientHeartbeatResponse(dst []byte, r *ClientHeartbeatResponse) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.LeaseID))
	dst = binary.BigEndian.AppendUint32(dst, durationMillis(r.TTL))
	return append(dst, r.Flags)
}

// DecodeClientHeartbeatResponse decodes a client heartbeat response body.
func DecodeClientHeartbeatResponse(body []byte) (ClientHeartbeatResponse, error) {
	r := reader{b: body}
	q := ClientHeartbeatResponse{LeaseID: int64(r.u64())}
	q.TTL = time.Duration(r.u32()) * time.Millisecond
	q.Flags = r.u8()
	if err := r.done(); err != nil {
		return ClientHeartbeatResponse{}, fmt.Errorf("%w: client heartbeat response", err)
	}
	return q, nil
}

func appendString16(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}

func durationMillis(d time.Duration) uint32 {
	ms := d / time.Millisecond
	if ms < 0 {
		return 0
	}
	if ms > 1<<32-1 {
		return 1<<32 - 1
	}
	return uint32(ms)
}

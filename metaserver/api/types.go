package api

import "time"

// Broker is one registered broker process.
type Broker struct {
	Group string `json:"group"`
	Role  string `json:"role"`  // "master" or "slave"
	Kind  string `json:"kind"`  // "realtime" or "delay"
	State string `json:"state"` // what the broker reports: "rw" or "readonly"
	// Epoch is the epoch the broker serves in: a master's own (the etcd
	// create revision of its registration), a slave's master's (0: none).
	Epoch    uint64 `json:"epoch"`
	BrokerID string `json:"brokerId"`
	Address  string `json:"address"`
	// Master is the address of its group's live master (the broker itself
	// for a master; what a slave copies from); empty when the group has none.
	Master       string    `json:"master,omitempty"`
	LeaseID      int64     `json:"leaseId"`
	Load         Load      `json:"load"`
	RegisteredAt time.Time `json:"registeredAt"`
}

// Load is what a broker reports of its load with each heartbeat.
type Load struct {
	InPerSec    uint32 `json:"inPerSec"`
	OutPerSec   uint32 `json:"outPerSec"`
	Subjects    uint32 `json:"subjects"`
	StoredBytes uint64 `json:"storedBytes"`
	// Pending counts a delay group's messages not yet forwarded.
	Pending uint64 `json:"pending"`
	// ReplicaLagBytes and ReplicaLagMillis: on a slave, how far its logs
	// are behind its master; on a master, how far its slave is (0 without
	// one).
	ReplicaLagBytes  uint64 `json:"replicaLagBytes"`
	ReplicaLagMillis uint64 `json:"replicaLagMillis"`
}

// Lag is how far a group's slave is behind its master.
type Lag struct {
	Bytes  uint64 `json:"bytes"`
	Millis uint64 `json:"millis"`
}

// Group is a broker group with its state as the meta server derives it.
type Group struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	State  string `json:"state"`            // "rw", "readonly" or "unavailable"
	Master string `json:"master,omitempty"` // the live master's address
	// MasterID and SlaveID are the broker ids holding the group's seats.
	MasterID string `json:"masterId,omitempty"`
	Slave    string `json:"slave,omitempty"` // the slave's address
	SlaveID  string `json:"slaveId,omitempty"`
	// Epoch is the live master's epoch (0: no master). It grows with every
	// election, so a switchover or failover shows as a larger one.
	Epoch uint64 `json:"epoch"`
	// SlaveEpoch is the epoch of the master the slave copies; a slave still
	// on an older epoch has not caught up with the latest election yet.
	SlaveEpoch uint64 `json:"slaveEpoch,omitempty"`
	// Lag is how far the slave is behind: the larger of what the master
	// and the slave report. nil without a slave.
	Lag *Lag `json:"lag,omitempty"`
	// WriteState is the master's write state as it reports it
	// (pkg/failover): "writable" (its eligible slave holds every
	// acknowledged write, or a lease covers them), "alone" (no eligible
	// slave: nobody else can be elected), "readonly", "fenced", "deposed"
	// or "handing-over"; WriteReason says why. Empty without a master.
	WriteState  string `json:"writeState,omitempty"`
	WriteReason string `json:"writeReason,omitempty"`
	// Eligible is the broker id of the slave that may take the group over
	// from its master (its eligible set); empty: none. Sync: the set is in
	// sync mode (the master runs --wait-slave). Released: the master left
	// the group to its eligible slave (a switchover, a clean shutdown, a
	// forced failover).
	Eligible string   `json:"eligible,omitempty"`
	Sync     bool     `json:"sync,omitempty"`
	Released bool     `json:"released,omitempty"`
	Readonly []string `json:"readonly,omitempty"` // subjects ("*" = all) an admin marked readonly
	Routes   int      `json:"routes"`             // subjects routed to the group
	Load     Load     `json:"load"`
}

// Route is a subject's broker groups.
type Route struct {
	Subject   string       `json:"subject"`
	Kind      string       `json:"kind"`
	Groups    []RouteGroup `json:"groups"`
	Version   int64        `json:"version"` // etcd mod revision of the route
	CreatedAt time.Time    `json:"createdAt"`
}

// RouteGroup is one group of a route with its state for producers.
type RouteGroup struct {
	Group  string `json:"group"`
	State  string `json:"state"`
	Master string `json:"master,omitempty"`
	Epoch  uint64 `json:"epoch,omitempty"` // the master's epoch; 0 when none is alive
}

// Consumer is one registered consumer.
type Consumer struct {
	Subject    string    `json:"subject"`
	Group      string    `json:"group"`
	ClientID   string    `json:"clientId"`
	ClientType string    `json:"clientType"`
	Online     bool      `json:"online"` // false when an admin took it offline
	Since      time.Time `json:"since"`  // its registration (zero: only a broker knows it)
	// Unacked is the messages it took and has not acked yet, over the
	// route's brokers; LastPull when one of them last served it a pull.
	Unacked  uint64     `json:"unacked"`
	LastPull *time.Time `json:"lastPull,omitempty"`
}

// Subject is one subject as the console's subject page shows it: its
// routes, the messages and in-rate its brokers report, and its consumer
// groups with their backlog and consumers.
type Subject struct {
	Subject string  `json:"subject"`
	Routes  []Route `json:"routes"`
	// Messages is the messages its realtime brokers hold; InPerSec the
	// rate they take it at, over their last heartbeat interval (each
	// group's out-rate is in Groups).
	Messages uint64          `json:"messages"`
	InPerSec uint64          `json:"inPerSec"`
	Groups   []ConsumerGroup `json:"groups"`
	Errors   []BrokerFailure `json:"errors,omitempty"`
}

// ConsumerGroup is a consumer group of a subject with its consumers and the
// backlog its route's masters report.
type ConsumerGroup struct {
	Subject   string     `json:"subject"`
	Group     string     `json:"group"`
	Consumers []Consumer `json:"consumers"`
	// Backlog is the messages of the subject the group has yet to take or
	// ack; RetryBacklog those waiting on its retry subject (%RETRY%…).
	Backlog      uint64 `json:"backlog"`
	RetryBacklog uint64 `json:"retryBacklog"`
	// DeadLetters counts the group's dead letters (%DEAD%…) not re-driven
	// nor purged.
	DeadLetters uint64 `json:"deadLetters"`
	// OutPerSec is the messages the group takes per second, over its
	// masters' last heartbeat interval.
	OutPerSec uint64          `json:"outPerSec"`
	PerBroker []GroupBacklog  `json:"perBroker"`
	Errors    []BrokerFailure `json:"errors,omitempty"`
}

// GroupBacklog is one broker group's share of a consumer group's backlog.
type GroupBacklog struct {
	BrokerGroup string `json:"brokerGroup"`
	Messages    uint64 `json:"messages"`
	Cursor      uint64 `json:"cursor"`
	Backlog     uint64 `json:"backlog"`
	OutPerSec   uint64 `json:"outPerSec"`
}

// BrokerFailure is a broker group an admin request could not reach.
type BrokerFailure struct {
	BrokerGroup string `json:"brokerGroup"`
	Error       string `json:"error"`
}

// MetaServer is one meta server process.
type MetaServer struct {
	ID        string    `json:"id"`
	TCP       string    `json:"tcp"`
	HTTP      string    `json:"http"`
	StartedAt time.Time `json:"startedAt"`
}

// Status is the cluster overview.
type Status struct {
	Revision    int64        `json:"revision"`
	Prefix      string       `json:"prefix"`
	MetaServers []MetaServer `json:"metaServers"`
	Brokers     int          `json:"brokers"`
	Groups      GroupCounts  `json:"groups"`
	Subjects    int          `json:"subjects"`
	Consumers   int          `json:"consumers"`
	InPerSec    uint64       `json:"inPerSec"`
	OutPerSec   uint64       `json:"outPerSec"`
	Replication Replication  `json:"replication"`
}

// Replication sums up the groups' master/slave pairs.
type Replication struct {
	// WithSlave counts groups with a live master and a slave; WithoutSlave
	// those with a master alone (a failover there loses the group's data
	// until the master comes back).
	WithSlave    int `json:"withSlave"`
	WithoutSlave int `json:"withoutSlave"`
	// MaxLag is the largest lag of any group's slave.
	MaxLag Lag `json:"maxLag"`
}

// GroupCounts counts groups by state.
type GroupCounts struct {
	Total       int `json:"total"`
	ReadWrite   int `json:"rw"`
	Readonly    int `json:"readonly"`
	Unavailable int `json:"unavailable"`
}

// ResetRequest resets a consumer group's offset: To is "earliest",
// "latest" or an RFC 3339 time. A group that does not exist yet (no
// consumer registered, no broker on the route has it) is created only with
// Create; without it the answer is 404.
type ResetRequest struct {
	To     string `json:"to"`
	Create bool   `json:"create,omitempty"`
}

// ActionResult says which broker groups carried out a relayed action.
type ActionResult struct {
	OK     []string        `json:"ok"`
	Errors []BrokerFailure `json:"errors,omitempty"`
}

// DeadLetter is one dead letter, decoded.
type DeadLetter struct {
	BrokerGroup string            `json:"brokerGroup"`
	Seq         uint64            `json:"seq"`
	ID          string            `json:"id"`
	Subject     string            `json:"subject"`
	Tags        []string          `json:"tags,omitempty"`
	Properties  map[string]string `json:"properties,omitempty"`
	Attempts    uint16            `json:"attempts"`
	CreatedAt   time.Time         `json:"createdAt"`
	Body        string            `json:"body"`                 // UTF-8 text, or base64 when BodyBase64
	BodyBase64  bool              `json:"bodyBase64,omitempty"` // Body is base64
	// BodyHidden: the caller may not read bodies (a listing without the
	// read bodies right); Body is empty.
	BodyHidden bool   `json:"bodyHidden,omitempty"`
	Size       int    `json:"size"`
	Error      string `json:"error,omitempty"` // the stored bytes did not parse
	// Why it died, as the consumer recorded it (protocol.RecordFailure):
	// the handler's last error text, when that delivery failed, and why
	// it went to dead letters. Empty for letters of older consumers.
	LastError string     `json:"lastError,omitempty"`
	FailedAt  *time.Time `json:"failedAt,omitempty"`
	DeadWhy   string     `json:"deadWhy,omitempty"`
}

// DeadLetters is a listing, or the outcome of a re-drive or purge.
type DeadLetters struct {
	Subject  string          `json:"subject"`
	Group    string          `json:"group"`
	Total    uint64          `json:"total"`
	Affected uint64          `json:"affected"`
	Letters  []DeadLetter    `json:"letters"`
	Errors   []BrokerFailure `json:"errors,omitempty"`
}

// DeadLetterAction names dead letters to re-drive or purge; empty IDs means
// all of the group's dead letters.
type DeadLetterAction struct {
	IDs []string `json:"ids,omitempty"`
}

// GroupRequest names a broker group to add to a route.
type GroupRequest struct {
	Group string `json:"group"`
}

// ReadonlyRequest marks or unmarks a group readonly for Subject ("" or "*":
// every subject).
type ReadonlyRequest struct {
	Subject string `json:"subject,omitempty"`
}

// SwitchoverRequest asks for a planned switchover of a group: its master
// hands the group to its slave. TimeoutMillis bounds the whole switchover
// (0: 30 s).
type SwitchoverRequest struct {
	TimeoutMillis int64 `json:"timeoutMillis,omitempty"`
}

// Seat is who held a group's master seat, and at which epoch.
type Seat struct {
	BrokerID string `json:"brokerId"`
	Address  string `json:"address"`
	Epoch    uint64 `json:"epoch"`
}

// Switchover is a completed switchover: the group's master was From and is
// now To, at a larger epoch.
type Switchover struct {
	Group      string `json:"group"`
	From       Seat   `json:"from"`
	To         Seat   `json:"to"`
	TookMillis int64  `json:"tookMillis"`
}

// Error is the body of every non-2xx answer. A refusal (401, 403) also
// names the request refused, the right it needs and, for a 403, the
// identity that lacks it.
type Error struct {
	Error    string `json:"error"`
	Refused  string `json:"refused,omitempty"`  // "POST /api/v1/groups/g1/readonly"
	Needs    string `json:"needs,omitempty"`    // "admin write", "admin read", "read bodies"
	Identity string `json:"identity,omitempty"` // "app:billing" (kind:name)
}

// ForceFailoverRequest is the body of POST /groups/{group}/failover. Force
// must be true: an unclean failover may lose acknowledged messages.
type ForceFailoverRequest struct {
	Force bool `json:"force"`
}

// ForcedFailover is the answer of a forced failover: the group's eligible
// set now names Slave, released, so it takes the group at its next
// heartbeat.
type ForcedFailover struct {
	Group     string `json:"group"`
	OldMaster string `json:"oldMaster,omitempty"` // the broker id the set belonged to
	Slave     string `json:"slave"`               // the broker id that may take the group
}

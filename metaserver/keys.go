package metaserver

import (
	"strings"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// Key layout under Options.Prefix (default "/qmq/"); values are JSON:
//
//	brokers/<group>/<role>                  brokerRecord   on the broker's lease
//	routes/<kind>/<subject>                 routeRecord    (kind: realtime | delay)
//	readonly/<group>/<subject or *>         readonlyRecord (admin marks)
//	consumers/<subject>/<group>/<client id> consumerRecord on the consumer's lease
//	offline/<subject>/<group>/<client id>   offlineRecord  (admin took it offline)
//	metaservers/<id>                        metaRecord     on the meta server's lease
//	identities/<name>                       auth.Entry     (identities.go)
//	eligible/<group>                        eligibleRecord the group's eligible set (pkg/failover)
//
// Names never contain "/": groups and subjects are [A-Za-z0-9._-], client
// ids add ":" and "@". Routes are kept under the user subject; lookups of
// %RETRY% and %DEAD% subjects use their real subject's route.
const (
	dirBrokers     = "brokers/"
	dirRoutes      = "routes/"
	dirReadonly    = "readonly/"
	dirConsumers   = "consumers/"
	dirOffline     = "offline/"
	dirMetaServers = "metaservers/"
	dirEligible    = "eligible/"
)

// allSubjects in a readonly key marks the group readonly for every subject.
const allSubjects = "*"

// keys builds and parses keys under one prefix.
type keys struct{ prefix string }

func (k keys) broker(group string, role protocol.BrokerRole) string {
	return k.prefix + dirBrokers + group + "/" + role.String()
}

func (k keys) route(kind protocol.BrokerKind, subject string) string {
	return k.prefix + dirRoutes + kind.String() + "/" + subject
}

func (k keys) readonly(group, subject string) string {
	return k.prefix + dirReadonly + group + "/" + subject
}

func (k keys) consumer(subject, group, clientID string) string {
	return k.prefix + dirConsumers + subject + "/" + group + "/" + clientID
}

func (k keys) offline(subject, group, clientID string) string {
	return k.prefix + dirOffline + subject + "/" + group + "/" + clientID
}

func (k keys) metaServer(id string) string { return k.prefix + dirMetaServers + id }

func (k keys) eligible(group string) string { return k.prefix + dirEligible + group }

// split returns the directory of key ("brokers/", …) and the parts after it,
// or "" when key is not one of ours.
func (k keys) split(key string) (dir string, parts []string) {
	rest, ok := strings.CutPrefix(key, k.prefix)
	if !ok {
		return "", nil
	}
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		return "", nil
	}
	return rest[:i+1], strings.Split(rest[i+1:], "/")
}

// brokerRecord is a broker's registration.
type brokerRecord struct {
	Group    string              `json:"group"`
	Role     protocol.BrokerRole `json:"role"`
	Kind     protocol.BrokerKind `json:"kind"`
	State    protocol.GroupState `json:"state"` // self-reported: rw or readonly
	BrokerID string              `json:"brokerId"`
	Address  string              `json:"address"`
	LeaseID  int64               `json:"leaseId"`
	Load     protocol.BrokerLoad `json:"load"`
	// Epoch: a master's, the number of its group's election it won (see
	// nextEpoch); a slave's, the epoch of the master it copies.
	Epoch        uint64    `json:"epoch"`
	RegisteredAt time.Time `json:"registeredAt"`
	// WriteState and WriteReason: a master's write state as it reports it
	// (pkg/failover), and why.
	WriteState  protocol.WriteState `json:"writeState,omitempty"`
	WriteReason string              `json:"writeReason,omitempty"`
}

// eligibleRecord is a group's eligible set (pkg/failover): the master it
// belongs to and the slave that may take the group over from it. Only that
// master changes it (CmdEligible, a compare-and-swap on its registration);
// an election replaces it in the same transaction. It lives on no lease: it
// outlasts the brokers, so a group whose master is gone can be taken only
// by that master or its eligible slave (or an admin's forced failover).
type eligibleRecord struct {
	// Master is the broker id of the master the set belongs to; "" when it
	// released the group (a switchover, a clean shutdown, a forced
	// failover): its slave may take it without more checks.
	Master     string `json:"master"`
	MasterAddr string `json:"masterAddr,omitempty"`
	// Slave is the eligible slave's broker id ("" none: nobody else may be
	// elected, so the master never fences itself).
	Slave string `json:"slave,omitempty"`
	// Sync: the master runs --wait-slave; its slave may take the group
	// over from it without waiting for its lease (a takeover).
	Sync bool `json:"sync"`
	// Forced: an admin forced the failover (an unclean one).
	Forced bool `json:"forced,omitempty"`
	// Epoch is the group's last elected epoch: the next election's is one
	// more (see nextEpoch). Kept by every rewrite of the set.
	Epoch     uint64    `json:"epoch,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// routeRecord is a subject's broker groups, in assignment order.
type routeRecord struct {
	Groups    []string  `json:"groups"`
	CreatedAt time.Time `json:"createdAt"`
}

// readonlyRecord is an admin's readonly mark.
type readonlyRecord struct {
	At time.Time `json:"at"`
}

// consumerRecord is a consumer's registration.
type consumerRecord struct {
	ClientType protocol.ClientType `json:"clientType"`
	LeaseID    int64               `json:"leaseId"`
	Since      time.Time           `json:"since"`
}

// offlineRecord is an admin's offline mark for a consumer.
type offlineRecord struct {
	At time.Time `json:"at"`
}

// metaRecord is a running meta server.
type metaRecord struct {
	TCP       string    `json:"tcp"`
	HTTP      string    `json:"http"`
	StartedAt time.Time `json:"startedAt"`
}

package failover

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// Slave-down policies (Options.SlaveDown).
const (
	// SlaveDownAlone: a master whose eligible slave is gone removes it from
	// the eligible set and serves alone (readonly while it cannot).
	SlaveDownAlone = "alone"
	// SlaveDownReadonly: it stays readonly until the slave is back.
	SlaveDownReadonly = "readonly"
)

// Options configure a Member. NewOptions holds the defaults.
type Options struct {
	// Kind, Group, BrokerID and Address describe the broker to the meta
	// servers (BrokerID defaults to Address, which is the address clients
	// and the slave reach it at).
	Kind     protocol.BrokerKind
	Group    string
	BrokerID string
	Address  string
	// MetaServers are the meta servers' addresses (at least one).
	MetaServers []string
	// Role is the role the server starts in: a master registers as its
	// group's master and becomes a slave when another broker holds the
	// group; a slave registers as slave.
	Role protocol.BrokerRole
	// Fixed keeps the configured role: no campaign, no demotion (a master
	// refused its seat takes no writes until it holds it).
	Fixed bool
	// WaitSlave: the master's send replies wait for its slave (sync mode:
	// fencing by replication, takeover by the eligible slave). Without it
	// the master acknowledges alone and writes under a lease (async mode).
	WaitSlave bool
	// SlaveDown is the sync-mode policy when the eligible slave is gone:
	// SlaveDownAlone (default) or SlaveDownReadonly.
	SlaveDown string
	// SuspectAfter is how long a silent peer is suspected gone: a slave
	// whose master has not answered (a master answers a long poll at least
	// every SuspectAfter/2) asks to take over; a master whose slave has not
	// asked drops it from the eligible set (default 1s). A connection that
	// breaks is suspected at once.
	SuspectAfter time.Duration
	// SlaveLagLimit: a connected slave whose copy lags this long counts as
	// gone (default 5s).
	SlaveLagLimit time.Duration
	// SlaveLease is how long after receiving an answer a slave promises not
	// to campaign (async mode; the master writes while it holds its meta
	// lease or this one). Master and slave must use the same (default 4s).
	SlaveLease time.Duration
	// Tick is how often the role loop looks at its state (default 20ms).
	Tick time.Duration
	// SlaveHeartbeat is how often a slave heartbeats: how soon it sees that
	// its master left (default 300ms). MasterHeartbeat is a master's
	// (default 0: a third of the lease TTL).
	SlaveHeartbeat  time.Duration
	MasterHeartbeat time.Duration
	// RequestTimeout bounds each request to a meta server (default 2s).
	RequestTimeout time.Duration
	// MetaOptions are added to every registration's options: TLS and
	// credentials for the meta servers (pkg/secure). Default none.
	MetaOptions []metaclient.Option
	// HandOverTimeout bounds how long a master that is closed waits for
	// its slave to hold everything before it leaves (default 5s).
	HandOverTimeout time.Duration
	// Registry, when set, gets the loop's metrics (qmq_failover_*).
	Registry prometheus.Registerer
	// Gate is the write gate the loop sets (nil: a new one); a server that
	// serves before its loop exists passes the one its handlers read.
	Gate *Gate
}

// NewOptions returns the defaults.
func NewOptions() Options {
	return Options{
		Role:            protocol.RoleMaster,
		SlaveDown:       SlaveDownAlone,
		SuspectAfter:    time.Second,
		SlaveLagLimit:   5 * time.Second,
		SlaveLease:      4 * time.Second,
		Tick:            20 * time.Millisecond,
		SlaveHeartbeat:  300 * time.Millisecond,
		RequestTimeout:  2 * time.Second,
		HandOverTimeout: 5 * time.Second,
	}
}

// ErrInvalidOptions: Validate found a setting that cannot work.
var ErrInvalidOptions = errors.New("failover: invalid options")

// Validate reports the first setting that cannot work.
func (o *Options) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	switch {
	case o.Kind != protocol.KindRealtime && o.Kind != protocol.KindDelay:
		return bad("kind %v", o.Kind)
	case !protocol.IsName(o.Group):
		return bad("group %q", o.Group)
	case o.Address == "":
		return bad("address is empty")
	case len(o.MetaServers) == 0:
		return bad("no meta server")
	case o.Role != protocol.RoleMaster && o.Role != protocol.RoleSlave:
		return bad("role %v", o.Role)
	case o.SlaveDown != SlaveDownAlone && o.SlaveDown != SlaveDownReadonly:
		return bad("slave down policy %q (alone or readonly)", o.SlaveDown)
	case o.SuspectAfter <= 0 || o.SlaveLagLimit <= 0 || o.SlaveLease <= 0 || o.Tick <= 0 || o.SlaveHeartbeat <= 0 ||
		o.RequestTimeout <= 0 || o.HandOverTimeout <= 0 || o.MasterHeartbeat < 0:
		return bad("durations must be positive")
	}
	return nil
}

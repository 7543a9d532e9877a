package failover

import (
	"context"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// Server is a broker as its role loop drives it. The loop calls every
// method from its own goroutine, one at a time; the master methods only
// while the server is a master, the slave ones only while it is a slave.
// Each store keeps its own log shipping (the server's): the loop needs only
// what this interface reports of it.
type Server interface {
	// Promote makes the slave its group's master at epoch, in place: its
	// copy has stopped (StopCopy), so everything it acknowledged to the old
	// master is in its logs; it opens its store for writes and records the
	// epoch's start (its current ends) before it serves. An error leaves
	// it a slave.
	Promote(epoch uint64) error
	// NewEpoch records that the master serves epoch from its current ends
	// on (its lease lapsed and it won its group again).
	NewEpoch(epoch uint64) error
	// Demote turns the master into a slave (the gate already refuses
	// writes): it fails the replies waiting for its slave (never
	// acknowledging them), stops its log shipping, reopens its store as a
	// copy and starts copying from the master Member.Following names.
	Demote() error
	// Load is what heartbeats report besides the state.
	Load() protocol.BrokerLoad

	// Slave reports the slave copying from this master.
	Slave() SlaveStatus
	// WaitSlave makes the master's send replies wait until its slave holds
	// their data (on) or not (off: the replies waiting complete). Turning
	// it on returns the switch point: every reply acknowledged without the
	// slave covers data below it, so a slave whose Acked reaches it holds
	// every acknowledged write.
	WaitSlave(on bool) (switchPoint int64)
	// FailWaiting fails the send replies waiting for the slave with err.
	FailWaiting(err error)
	// HandOver waits (the gate refuses writes) until the slave holds
	// everything this master has, or ctx ends.
	HandOver(ctx context.Context) error

	// Copy reports the slave's copy.
	Copy() CopyStatus
	// StopCopy stops copying: when it returns, no acknowledgement of the
	// master's data leaves the slave any more.
	StopCopy()
	// StartCopy copies again (from the master Member.Following names).
	StartCopy()
}

// SlaveStatus is what a master knows of the slave copying from it.
type SlaveStatus struct {
	// ID is the broker id the slave registered with ("" none seen).
	ID string
	// Connected: it has a request being answered (a long poll), or sent
	// one within the suspicion time, and its connection did not close
	// since (SlaveWatch).
	Connected bool
	// Acked is the position the slave's copy durably holds and End the
	// master's, in the server's own unit (a log offset, a replay
	// position): WaitSlave's switch point is one of these.
	Acked, End int64
	// Lag is the age of the oldest data the slave lacks (0: it holds all).
	Lag time.Duration
	// LeaseUntil (a Now reading; 0 none) is until when the slave promised
	// not to campaign, as this master counts it (SlaveWatch).
	LeaseUntil int64
}

// CopyStatus is what a slave knows of its copy.
type CopyStatus struct {
	// Master is the address it copies from ("" none yet).
	Master string
	// Epoch is the epoch of the master it copies (0 none yet).
	Epoch uint64
	// Heard (a Now reading; 0 never) is when the last answer from the
	// master arrived: the slave's promise not to campaign runs from it.
	// Asked (a Now reading; 0 none) is when the oldest request still
	// waiting for the master's answer was sent.
	Heard, Asked int64
	// Failing: the last request could not reach the master (refused,
	// reset, timed out) and nothing was heard since.
	Failing bool
}

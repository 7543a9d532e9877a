package protocol

import (
	"encoding/binary"
	"fmt"
	"time"
)

// CmdSwitchover asks a group's master to hand the group to its slave (a
// planned switchover). The meta server relays it to the master on an
// operator's request (qmqctl switchover, the console); brokers serve it.
const CmdSwitchover Command = 16

func init() { commandNames[CmdSwitchover] = "switchover" }

// Switchover body (CmdSwitchover), big-endian:
//
//	SwitchoverRequest   epoch u64 | timeout ms u32 | group s8
//	response            empty
//
// group is the broker group to hand over; a broker of another group answers
// StatusInvalid. epoch is the master's epoch as the meta server knows it
// (the group master key's CreateRevision); a broker that is not the group's
// master at that epoch answers StatusNotMaster (a slave, a deposed master) or
// StatusStaleEpoch (it is master at a newer epoch: the caller's view is old).
// epoch 0 skips the check. timeout bounds the whole handover on the broker:
// how long it may wait for its slave to hold its committed ends (0 = the
// broker's default).
//
// A master that accepts stops taking writes, waits until its slave holds
// everything it has committed, records it as the group's eligible slave if
// it was not yet, unregisters as master (RegisterLeaving on its master
// registration, which releases the group to the eligible slave) and rejoins
// the group as a slave; the slave's next heartbeat finds the group released
// to it and wins the election at a higher epoch. The
// master answers StatusOK once it has unregistered, before the slave has
// won: the caller watches the meta server for the new master. It answers
// with an error and keeps serving as master when it cannot hand over:
// StatusUnavailable when it has no connected slave that caught up, StatusRetryLater when
// the slave did not catch up within timeout (writes resume), StatusBusy when
// a switchover is already under way. A broker that does not know the command
// answers StatusUnknownCommand.

// SwitchoverRequest asks a group's master to hand the group to its slave.
type SwitchoverRequest struct {
	Group   string
	Epoch   uint64        // the master's epoch the caller saw; 0 = do not check
	Timeout time.Duration // bound on the handover; 0 = the broker's default
}

// MaxSwitchoverTimeout is the longest timeout a SwitchoverRequest carries.
const MaxSwitchoverTimeout = time.Duration(1<<32-1) * time.Millisecond

// AppendSwitchoverRequest appends the body of q. Timeout is rounded down to
// a millisecond and capped at MaxSwitchoverTimeout; a negative one is 0.
func AppendSwitchoverRequest(dst []byte, q *SwitchoverRequest) []byte {
	dst = binary.BigEndian.AppendUint64(dst, q.Epoch)
	ms := q.Timeout.Milliseconds()
	switch {
	case ms < 0:
		ms = 0
	case ms > 1<<32-1:
		ms = 1<<32 - 1
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(ms))
	return appendString8(dst, q.Group)
}

// DecodeSwitchoverRequest decodes a switchover request body; an empty group
// is ErrBadRequest.
func DecodeSwitchoverRequest(body []byte) (SwitchoverRequest, error) {
	r := reader{b: body}
	q := SwitchoverRequest{Epoch: r.u64()}
	q.Timeout = time.Duration(r.u32()) * time.Millisecond
	q.Group = r.string8()
	if err := r.done(); err != nil {
		return SwitchoverRequest{}, fmt.Errorf("%w: switchover request", err)
	}
	if q.Group == "" {
		return SwitchoverRequest{}, fmt.Errorf("%w: switchover request without a group", ErrBadRequest)
	}
	return q, nil
}

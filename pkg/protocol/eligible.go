package protocol

import (
	"encoding/binary"
	"fmt"
)

// CmdEligible changes a group's eligible set: the master names the slave
// that may take the group over (or none) and the set's mode. Only the
// group's master at epoch may change it; the meta server writes it in a
// compare-and-swap on the master's registration (see pkg/failover).
const CmdEligible Command = 33

func init() { commandNames[CmdEligible] = "eligible" }

// Eligible bodies (CmdEligible), big-endian:
//
//	EligibleRequest   group s8 | broker id s8 | epoch u64 | flags u8 | slave s8
//	EligibleResponse  flags u8 | slave s8
//
// broker id and epoch are the master's own; slave is the broker id of the
// slave to record as eligible, "" for none. flags bit0 (RegisterSync): the
// master runs --wait-slave (the set's mode is sync). The response is the set
// as recorded (the same flags as RegisterResponse.Flags, RegisterSyncSet
// and RegisterHasSet). A broker that is not the group's master at epoch is
// answered StatusNotMaster (it was deposed), a meta server that cannot
// reach etcd StatusUnavailable (the set may or may not have changed when a
// request fails without an answer: ask again).

// EligibleRequest asks to record a group's eligible slave.
type EligibleRequest struct {
	Group    string
	BrokerID string
	Epoch    uint64
	Flags    uint8
	Slave    string
}

// EligibleResponse is a group's eligible set as recorded.
type EligibleResponse struct {
	Flags uint8
	Slave string
}

// AppendEligibleRequest appends the body of q.
func AppendEligibleRequest(dst []byte, q *EligibleRequest) []byte {
	dst = appendString8(dst, q.Group)
	dst = appendString8(dst, q.BrokerID)
	dst = binary.BigEndian.AppendUint64(dst, q.Epoch)
	dst = append(dst, q.Flags)
	return appendString8(dst, q.Slave)
}

// DecodeEligibleRequest decodes an eligible request body; a request
// without a group or broker id is ErrBadRequest.
func DecodeEligibleRequest(body []byte) (EligibleRequest, error) {
	r := reader{b: body}
	q := EligibleRequest{Group: r.string8(), BrokerID: r.string8(), Epoch: r.u64(), Flags: r.u8(), Slave: r.string8()}
	if err := r.done(); err != nil {
		return EligibleRequest{}, fmt.Errorf("%w: eligible request", err)
	}
	if q.Group == "" || q.BrokerID == "" {
		return EligibleRequest{}, fmt.Errorf("%w: eligible request without a group or broker id", ErrBadRequest)
	}
	return q, nil
}

// AppendEligibleResponse appends the body of p.
func AppendEligibleResponse(dst []byte, p *EligibleResponse) []byte {
	dst = append(dst, p.Flags)
	return appendString8(dst, p.Slave)
}

// DecodeEligibleResponse decodes an eligible response body.
func DecodeEligibleResponse(body []byte) (EligibleResponse, error) {
	r := reader{b: body}
	p := EligibleResponse{Flags: r.u8(), Slave: r.string8()}
	if err := r.done(); err != nil {
		return EligibleResponse{}, fmt.Errorf("%w: eligible response", err)
	}
	return p, nil
}

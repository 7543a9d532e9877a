package protocol

import (
	"encoding/binary"
	"fmt"
)

// CmdSyncEpoch: before it copies a master's logs, a slave sends its epoch
// history and learns where its copy must be cut back to (failover: an old
// master may hold records its successor never got) and the master's
// history, which it keeps as its own (SyncEpochRequest → SyncEpochResponse).
const CmdSyncEpoch Command = 52

func init() { commandNames[CmdSyncEpoch] = "sync-epoch" }

// Epoch bodies, big-endian:
//
//	sync epoch request   group s8 | history
//	sync epoch response  truncate message i64 | truncate action i64 | history
//	history              count u16 | count × (epoch u64 | message start i64 | action start i64)
//
// A history lists the epochs whose masters wrote the log, oldest first:
// from (message start, action start) on, the log was written by the
// master of that epoch (up to the next entry's starts). Epochs strictly
// increase and starts never decrease. The response's truncate offsets are
// where the slave's copy stops agreeing with the master's logs: the slave
// cuts both logs back to them when its ends lie past them.

// MaxEpochHistory bounds a history's entries.
const MaxEpochHistory = 4096

// EpochStart is one entry of an epoch history.
type EpochStart struct {
	Epoch        uint64
	MessageStart int64
	ActionStart  int64
}

// SyncEpochRequest is a slave's group and epoch history.
type SyncEpochRequest struct {
	Group   string
	History []EpochStart
}

// SyncEpochResponse tells a slave where to cut its copy back to and gives
// the master's history.
type SyncEpochResponse struct {
	TruncateMessage int64
	TruncateAction  int64
	History         []EpochStart
}

func appendHistory(dst []byte, h []EpochStart) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(h)))
	for _, e := range h {
		dst = binary.BigEndian.AppendUint64(dst, e.Epoch)
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.MessageStart))
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.ActionStart))
	}
	return dst
}

func (r *reader) history() []EpochStart {
	n := int(r.u16())
	if !r.need(n * 24) {
		return nil
	}
	h := make([]EpochStart, n)
	for i := range h {
		h[i] = EpochStart{Epoch: r.u64(), MessageStart: int64(r.u64()), ActionStart: int64(r.u64())}
	}
	return h
}

// CheckEpochHistory reports whether h is a valid history: at most
// MaxEpochHistory entries, epochs strictly increasing, starts not
// negative and never decreasing.
func CheckEpochHistory(h []EpochStart) error {
	if len(h) > MaxEpochHistory {
		return fmt.Errorf("%w: epoch history of %d entries (at most %d)", ErrInvalid, len(h), MaxEpochHistory)
	}
	for i, e := range h {
		if e.MessageStart < 0 || e.ActionStart < 0 {
			return fmt.Errorf("%w: epoch %d starts at a negative offset", ErrInvalid, e.Epoch)
		}
		if i > 0 {
			p := h[i-1]
			if e.Epoch <= p.Epoch || e.MessageStart < p.MessageStart || e.ActionStart < p.ActionStart {
				return fmt.Errorf("%w: epoch history entry %d (epoch %d at %d/%d) does not follow epoch %d at %d/%d",
					ErrInvalid, i, e.Epoch, e.MessageStart, e.ActionStart, p.Epoch, p.MessageStart, p.ActionStart)
			}
		}
	}
	return nil
}

// AppendSyncEpochRequest appends the body of q.
func AppendSyncEpochRequest(dst []byte, q *SyncEpochRequest) []byte {
	dst = appendString8(dst, q.Group)
	return appendHistory(dst, q.History)
}

// DecodeSyncEpochRequest decodes a sync epoch request body.
func DecodeSyncEpochRequest(body []byte) (SyncEpochRequest, error) {
	r := reader{b: body}
	q := SyncEpochRequest{Group: r.string8(), History: r.history()}
	if err := r.done(); err != nil {
		return SyncEpochRequest{}, fmt.Errorf("%w: sync epoch request", err)
	}
	if err := CheckEpochHistory(q.History); err != nil {
		return SyncEpochRequest{}, err
	}
	return q, nil
}

// AppendSyncEpochResponse appends the body of p.
func AppendSyncEpochResponse(dst []byte, p *SyncEpochResponse) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(p.TruncateMessage))
	dst = binary.BigEndian.AppendUint64(dst, uint64(p.TruncateAction))
	return appendHistory(dst, p.History)
}

// DecodeSyncEpochResponse decodes a sync epoch response body.
func DecodeSyncEpochResponse(body []byte) (SyncEpochResponse, error) {
	r := reader{b: body}
	p := SyncEpochResponse{TruncateMessage: int64(r.u64()), TruncateAction: int64(r.u64()), History: r.history()}
	if err := r.done(); err != nil {
		return SyncEpochResponse{}, fmt.Errorf("%w: sync epoch response", err)
	}
	if p.TruncateMessage < 0 || p.TruncateAction < 0 {
		return SyncEpochResponse{}, fmt.Errorf("%w: sync epoch response truncates to a negative offset", ErrInvalid)
	}
	if err := CheckEpochHistory(p.History); err != nil {
		return SyncEpochResponse{}, err
	}
	return p, nil
}

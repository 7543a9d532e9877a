package protocol

import (
	"encoding/binary"
	"fmt"
	"strconv"
)

// Control over scheduled messages (delay servers).
//
// A delayed message may carry a schedule key in the property
// PropScheduleKey: unique per subject among the messages pending in a delay
// group. A second message with a pending key is refused with
// StatusKeyExists (the same message sent again, same id, is
// StatusDuplicate: stored once).
//
// CmdScheduleCancel cancels pending messages, each named by (subject, key)
// or (subject, message id). Each gets a definite answer: StatusOK (cancelled:
// it will never be forwarded, also after a crash or a failover),
// StatusAlreadyFired (it has been or will be forwarded), StatusNotFound.
const (
	// PropScheduleKey is the property that carries a message's schedule key.
	PropScheduleKey = "qmq.schedule.key"
	// MaxScheduleKeyLen is the longest schedule key, in bytes.
	MaxScheduleKeyLen = 200
	// PropScheduleReplace "1" (or "true") on a keyed message replaces the
	// pending message with its key instead of being refused: the old one is
	// cancelled and the new one stored in one step (StatusOK either way).
	PropScheduleReplace = "qmq.schedule.replace"

	// CmdScheduleCancel cancels scheduled messages (ScheduleCancelRequest →
	// send-response layout: one status per target).
	CmdScheduleCancel Command = 24
	// CmdScheduleReschedule moves scheduled messages to new due times
	// (ScheduleRescheduleRequest → one status per target, as cancel).
	CmdScheduleReschedule Command = 25

	// StatusKeyExists: a message with this schedule key is pending.
	StatusKeyExists Status = 30
	// StatusAlreadyFired: the scheduled message has been or will be
	// forwarded; it can no longer be cancelled.
	StatusAlreadyFired Status = 31
)

// Sentinels of the schedule statuses; match with errors.Is.
var (
	ErrKeyExists    = &Error{Status: StatusKeyExists}
	ErrAlreadyFired = &Error{Status: StatusAlreadyFired}
)

func init() {
	commandNames[CmdScheduleCancel] = "schedule-cancel"
	commandNames[CmdScheduleReschedule] = "schedule-reschedule"
	statusNames[StatusKeyExists] = "schedule key exists"
	statusNames[StatusAlreadyFired] = "already fired"
}

// ScheduleTarget names one scheduled message: by Key when ByID is false,
// else by the message id in Key.
type ScheduleTarget struct {
	Subject string
	Key     string
	ByID    bool
}

// ScheduleCancelRequest body (CmdScheduleCancel):
//
//	+--------+-------+------------------------------------------------------+
//	| epoch  | count | count × (kind u8 | subject len u8 | subject |        |
//	|  u64   |  u32  |          name len u16 | name)                         |
//	+--------+-------+------------------------------------------------------+
//
// kind 1: name is a schedule key; kind 2: name is a message id. epoch as in
// SendRequest. The response is a send response: one status per target.
type ScheduleCancelRequest struct {
	Epoch   uint64
	Targets []ScheduleTarget
}

const (
	targetByKey = 1
	targetByID  = 2
)

// CheckScheduleTarget checks a target's fields.
func (l Limits) CheckScheduleTarget(t ScheduleTarget) error {
	if err := l.CheckSubject(t.Subject); err != nil {
		return err
	}
	switch {
	case t.Key == "":
		return Errorf(StatusInvalid, "empty schedule key or message id")
	case len(t.Key) > MaxScheduleKeyLen:
		return Errorf(StatusInvalid, fmt.Sprintf("schedule key of %d bytes, longest %d", len(t.Key), MaxScheduleKeyLen))
	}
	return nil
}

// AppendScheduleCancelRequest appends the body of a cancel request.
func AppendScheduleCancelRequest(dst []byte, q ScheduleCancelRequest) []byte {
	return appendTargets(dst, q.Epoch, q.Targets, nil)
}

// ScheduleRescheduleRequest body (CmdScheduleReschedule): a cancel
// request's layout with each target followed by its new due time, Unix
// milliseconds i64.
type ScheduleRescheduleRequest struct {
	Epoch   uint64
	Targets []ScheduleTarget
	Dues    []int64 // one per target
}

// AppendScheduleRescheduleRequest appends the body of a reschedule request.
func AppendScheduleRescheduleRequest(dst []byte, q ScheduleRescheduleRequest) []byte {
	return appendTargets(dst, q.Epoch, q.Targets, q.Dues)
}

// DecodeScheduleRescheduleRequest decodes a reschedule request body.
func DecodeScheduleRescheduleRequest(body []byte) (ScheduleRescheduleRequest, error) {
	epoch, targets, dues, err := decodeTargets(body, true)
	if err != nil {
		return ScheduleRescheduleRequest{}, fmt.Errorf("%w: reschedule request", err)
	}
	return ScheduleRescheduleRequest{Epoch: epoch, Targets: targets, Dues: dues}, nil
}

func appendTargets(dst []byte, epoch uint64, targets []ScheduleTarget, dues []int64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, epoch)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(targets)))
	for i, t := range targets {
		kind := byte(targetByKey)
		if t.ByID {
			kind = targetByID
		}
		dst = append(dst, kind)
		dst = appendString8(dst, t.Subject)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(t.Key)))
		dst = append(dst, t.Key...)
		if dues != nil {
			dst = binary.BigEndian.AppendUint64(dst, uint64(dues[i]))
		}
	}
	return dst
}

// DecodeScheduleCancelRequest decodes a cancel request body.
func DecodeScheduleCancelRequest(body []byte) (ScheduleCancelRequest, error) {
	epoch, targets, _, err := decodeTargets(body, false)
	if err != nil {
		return ScheduleCancelRequest{}, fmt.Errorf("%w: cancel request", err)
	}
	return ScheduleCancelRequest{Epoch: epoch, Targets: targets}, nil
}

func decodeTargets(body []byte, withDues bool) (uint64, []ScheduleTarget, []int64, error) {
	r := reader{b: body}
	epoch := r.u64()
	n := r.u32()
	if r.err == nil && uint64(n)*4 > uint64(len(body)) {
		return 0, nil, nil, fmt.Errorf("%w: %d targets in %d bytes", ErrTruncated, n, len(body))
	}
	var targets []ScheduleTarget
	var dues []int64
	for i := uint32(0); i < n && r.err == nil; i++ {
		kind := r.u8()
		t := ScheduleTarget{Subject: r.string8(), Key: string(r.bytes16())}
		switch kind {
		case targetByKey:
		case targetByID:
			t.ByID = true
		default:
			if r.err == nil {
				return 0, nil, nil, fmt.Errorf("%w: target kind %d", ErrTruncated, kind)
			}
		}
		targets = append(targets, t)
		if withDues {
			dues = append(dues, int64(r.u64()))
		}
	}
	if err := r.done(); err != nil {
		return 0, nil, nil, err
	}
	return epoch, targets, dues, nil
}

// PropExpireAt is the property that carries a message's expiry: Unix
// milliseconds in decimal. A message past it is not delivered: the delay
// server drops it instead of forwarding it (qmq_delay_messages_expired_total).
const PropExpireAt = "qmq.expire.at"

// ExpiryOf returns the expiry a message carries (PropExpireAt), if any; a
// value that is not a decimal number is no expiry.
func ExpiryOf(v *View) (int64, bool) {
	var at int64
	found := false
	v.Properties(func(k, val []byte) bool {
		if string(k) != PropExpireAt {
			return true
		}
		n, err := strconv.ParseInt(string(val), 10, 64)
		at, found = n, err == nil
		return false
	})
	return at, found
}

// Recurring schedules (delay servers): a keyed delayed message carrying
// PropCronSpec is a schedule's template; the delay server sends an
// occurrence at each time the expression names and keeps the template for
// the next one (delay/recurring.go).
const (
	// PropCronSpec: a cron expression of five fields, or a descriptor such
	// as "@every 1m" or "@daily".
	PropCronSpec = "qmq.cron.spec"
	// PropCronZone: the IANA time zone the expression is read in (default
	// UTC).
	PropCronZone = "qmq.cron.zone"
	// PropCronUntil: the last time an occurrence may fall due, Unix ms.
	PropCronUntil = "qmq.cron.until"
	// PropCronMissed: what to do with occurrences missed while no delay
	// server could fire them: "once" (default: one late occurrence) or
	// "skip".
	PropCronMissed = "qmq.cron.missed"
	// PropCronOccurrence is set on each occurrence: its due time, Unix ms.
	PropCronOccurrence = "qmq.cron.occurrence"
)

package protocol

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Admin bodies: what the meta server relays to a broker's master when an
// operator acts (qmqctl, the web console). A broker answers each with
// StatusOK and the response body below, or a non-OK status and a message for
// people (StatusNotFound for a subject or group it does not hold).
//
// ConsumerManageRequest (CmdConsumerManage), response body empty:
//
//	action u8 | subject s16 | group s8 | consumer s8 | time ms i64
//
// ManageResetEarliest / ManageResetLatest / ManageResetTime move the group's
// cursor on the subject's consume log to its first entry, past its last
// entry, or to the first entry stored at or after time (consumer is empty).
// ManageConsumerOffline stops handing messages to consumer and gives its
// un-acked messages to the rest of its group; ManageConsumerOnline undoes it.
//
// BrokerStatsRequest (CmdBrokerStats):
//
//	subject s16 | group s8            (empty = every subject / every group)
//
// BrokerStatsResponse:
//
//	time ms i64 | in/s u32 | out/s u32 | stored bytes u64 | subject count u32 |
//	subject count × (subject s16 | messages u64 | in/s u32 | group count u32 |
//	  group count × (group s8 | cursor u64 | backlog u64 | consumer count u32 |
//	    consumer count × (consumer s8 | flags u8 | unacked u64 | last seen ms i64))) |
//	[ group total u32 | group total × out/s u32 ]   (optional trailer)
//
// The trailer gives each group's out-rate (entries taken per second), in the
// order the groups appear; a response without it (an older broker) decodes
// with out-rates 0. A subject's in/s is messages stored per second. messages is the subject's consume-log length (its next sequence); cursor is
// the group's next consume sequence; backlog is messages − cursor plus the
// group's un-acked entries. consumer flags bit0 (ConsumerOffline): taken
// offline by an admin. A dead-letter subject %DEAD%<subject>%<group> lists
// its group with cursor 0 and backlog the dead letters it holds (neither
// re-driven nor purged; masters only).
//
// DeadLettersRequest (CmdDeadLetters):
//
//	action u8 | subject s16 | group s8 | after u64 | max u32 |
//	id count u16 | id count × id s8
//
// DeadLettersList returns up to max dead letters with a sequence > after
// (paging). DeadLettersInspect returns those whose message id is listed.
// DeadLettersRedrive sends the listed ones (all when ids is empty) back to the
// group (they arrive again on %RETRY% with a fresh attempt count) and removes
// them from the dead-letter subject. DeadLettersPurge drops the listed ones
// (all when ids is empty).
//
// DeadLettersResponse:
//
//	total u64 | affected u64 | count u32 | count × (seq u64 | len u32 | message)
//
// total is how many dead letters the group has (after the action); affected
// is how many were re-driven or purged; each message is the stored encoding
// (ParseMessage reads it).

// ManageAction is what a ConsumerManageRequest does.
type ManageAction uint8

const (
	// ManageResetEarliest moves the group's cursor to the first message.
	ManageResetEarliest ManageAction = 1
	// ManageResetLatest moves the group's cursor past the last message.
	ManageResetLatest ManageAction = 2
	// ManageResetTime moves the group's cursor to the first message stored at
	// or after Time.
	ManageResetTime ManageAction = 3
	// ManageConsumerOffline takes one consumer of the group offline.
	ManageConsumerOffline ManageAction = 4
	// ManageConsumerOnline brings it back.
	ManageConsumerOnline ManageAction = 5
)

var manageActionNames = map[ManageAction]string{
	ManageResetEarliest:   "reset-earliest",
	ManageResetLatest:     "reset-latest",
	ManageResetTime:       "reset-time",
	ManageConsumerOffline: "consumer-offline",
	ManageConsumerOnline:  "consumer-online",
}

// String returns the action's name.
func (a ManageAction) String() string {
	if s, ok := manageActionNames[a]; ok {
		return s
	}
	return fmt.Sprintf("manage-action(%d)", uint8(a))
}

// ConsumerManageRequest changes a consumer group's state on a broker.
type ConsumerManageRequest struct {
	Action   ManageAction
	Subject  string
	Group    string
	Consumer string    // ManageConsumerOffline/Online only
	Time     time.Time // ManageResetTime only
}

// AppendConsumerManageRequest appends the body of r.
func AppendConsumerManageRequest(dst []byte, r *ConsumerManageRequest) []byte {
	dst = append(dst, uint8(r.Action))
	dst = appendString16(dst, r.Subject)
	dst = appendString8(dst, r.Group)
	dst = appendString8(dst, r.Consumer)
	return binary.BigEndian.AppendUint64(dst, uint64(unixMillis(r.Time)))
}

// DecodeConsumerManageRequest decodes a consumer manage request body; an
// unknown action is ErrBadRequest.
func DecodeConsumerManageRequest(body []byte) (ConsumerManageRequest, error) {
	r := reader{b: body}
	q := ConsumerManageRequest{Action: ManageAction(r.u8())}
	q.Subject = string(r.bytes16())
	q.Group = r.string8()
	q.Consumer = r.string8()
	q.Time = fromMillis(int64(r.u64()))
	if err := r.done(); err != nil {
		return ConsumerManageRequest{}, fmt.Errorf("%w: consumer manage request", err)
	}
	if _, ok := manageActionNames[q.Action]; !ok {
		return ConsumerManageRequest{}, fmt.Errorf("%w: consumer manage action %d", ErrBadRequest, q.Action)
	}
	return q, nil
}

// BrokerStatsRequest asks a broker for its subjects, groups and backlog.
type BrokerStatsRequest struct {
	Subject string // empty: every subject
	Group   string // empty: every consumer group
}

// AppendBrokerStatsRequest appends the body of r.
func AppendBrokerStatsRequest(dst []byte, r *BrokerStatsRequest) []byte {
	dst = appendString16(dst, r.Subject)
	return appendString8(dst, r.Group)
}

// DecodeBrokerStatsRequest decodes a broker stats request body.
func DecodeBrokerStatsRequest(body []byte) (BrokerStatsRequest, error) {
	r := reader{b: body}
	q := BrokerStatsRequest{Subject: string(r.bytes16()), Group: r.string8()}
	if err := r.done(); err != nil {
		return BrokerStatsRequest{}, fmt.Errorf("%w: broker stats request", err)
	}
	return q, nil
}

// ConsumerOffline in ConsumerStats.Flags: taken offline by an admin.
const ConsumerOffline uint8 = 1 << 0

// ConsumerStats is one consumer of a group on one broker.
type ConsumerStats struct {
	Consumer string
	Flags    uint8
	Unacked  uint64
	LastSeen time.Time
}

// GroupStats is one consumer group of a subject on one broker; OutPerSec
// the entries it takes per second (its cursor's advance).
type GroupStats struct {
	Group     string
	Cursor    uint64
	Backlog   uint64
	OutPerSec uint32
	Consumers []ConsumerStats
}

// SubjectStats is one subject on one broker.
type SubjectStats struct {
	Subject  string
	Messages uint64
	InPerSec uint32
	Groups   []GroupStats
}

// BrokerStatsResponse is a broker's view of its subjects and groups.
type BrokerStatsResponse struct {
	Time        time.Time
	InPerSec    uint32
	OutPerSec   uint32
	StoredBytes uint64
	Subjects    []SubjectStats
}

// Smallest encodings, to reject counts the body cannot hold.
const (
	subjectStatsMinSize  = 2 + 8 + 4 + 4
	groupStatsMinSize    = 1 + 8 + 8 + 4
	consumerStatsMinSize = 1 + 1 + 8 + 8
	deadLetterMinSize    = 8 + 4
)

// AppendBrokerStatsResponse appends the body of r.
func AppendBrokerStatsResponse(dst []byte, r *BrokerStatsResponse) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(unixMillis(r.Time)))
	dst = binary.BigEndian.AppendUint32(dst, r.InPerSec)
	dst = binary.BigEndian.AppendUint32(dst, r.OutPerSec)
	dst = binary.BigEndian.AppendUint64(dst, r.StoredBytes)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(r.Subjects)))
	for i := range r.Subjects {
		s := &r.Subjects[i]
		dst = appendString16(dst, s.Subject)
		dst = binary.BigEndian.AppendUint64(dst, s.Messages)
		dst = binary.BigEndian.AppendUint32(dst, s.InPerSec)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(s.Groups)))
		for j := range s.Groups {
			g := &s.Groups[j]
			dst = appendString8(dst, g.Group)
			dst = binary.BigEndian.AppendUint64(dst, g.Cursor)
			dst = binary.BigEndian.AppendUint64(dst, g.Backlog)
			dst = binary.BigEndian.AppendUint32(dst, uint32(len(g.Consumers)))
			for k := range g.Consumers {
				c := &g.Consumers[k]
				dst = appendString8(dst, c.Consumer)
				dst = append(dst, c.Flags)
				dst = binary.BigEndian.AppendUint64(dst, c.Unacked)
				dst = binary.BigEndian.AppendUint64(dst, uint64(unixMillis(c.LastSeen)))
			}
		}
	}
	groups := 0
	for i := range r.Subjects {
		groups += len(r.Subjects[i].Groups)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(groups))
	for i := range r.Subjects {
		for _, g := range r.Subjects[i].Groups {
			dst = binary.BigEndian.AppendUint32(dst, g.OutPerSec)
		}
	}
	return dst
}

// count reads a u32 count and checks that the rest of the body can hold
// that many items of at least minSize bytes.
func (r *reader) count(minSize int) int {
	n := r.u32()
	if r.err == nil && uint64(n)*uint64(minSize) > uint64(len(r.b)-r.off) {
		r.err = ErrTruncated
		return 0
	}
	return int(n)
}

// DecodeBrokerStatsResponse decodes a broker stats response body.
func DecodeBrokerStatsResponse(body []byte) (BrokerStatsResponse, error) {
	r := reader{b: body}
	q := BrokerStatsResponse{Time: fromMillis(int64(r.u64())), InPerSec: r.u32(), OutPerSec: r.u32(), StoredBytes: r.u64()}
	ns := r.count(subjectStatsMinSize)
	for i := 0; i < ns && r.err == nil; i++ {
		s := SubjectStats{Subject: string(r.bytes16()), Messages: r.u64(), InPerSec: r.u32()}
		ng := r.count(groupStatsMinSize)
		for j := 0; j < ng && r.err == nil; j++ {
			g := GroupStats{Group: r.string8(), Cursor: r.u64(), Backlog: r.u64()}
			nc := r.count(consumerStatsMinSize)
			for k := 0; k < nc && r.err == nil; k++ {
				c := ConsumerStats{Consumer: r.string8(), Flags: r.u8(), Unacked: r.u64()}
				c.LastSeen = fromMillis(int64(r.u64()))
				g.Consumers = append(g.Consumers, c)
			}
			s.Groups = append(s.Groups, g)
		}
		q.Subjects = append(q.Subjects, s)
	}
	if r.err == nil && r.off < len(r.b) {
		groups := 0
		for i := range q.Subjects {
			groups += len(q.Subjects[i].Groups)
		}
		if n := r.count(4); r.err == nil && n != groups {
			r.err = fmt.Errorf("%w: %d out-rates for %d groups", ErrTrailingBytes, n, groups)
		}
		for i := 0; i < len(q.Subjects) && r.err == nil; i++ {
			for j := range q.Subjects[i].Groups {
				q.Subjects[i].Groups[j].OutPerSec = r.u32()
			}
		}
	}
	if err := r.done(); err != nil {
		return BrokerStatsResponse{}, fmt.Errorf("%w: broker stats response", err)
	}
	return q, nil
}

// DeadLetterAction is what a DeadLettersRequest does.
type DeadLetterAction uint8

const (
	// DeadLettersList pages through a group's dead letters.
	DeadLettersList DeadLetterAction = 1
	// DeadLettersInspect returns the dead letters with the given ids.
	DeadLettersInspect DeadLetterAction = 2
	// DeadLettersRedrive sends dead letters back to the group.
	DeadLettersRedrive DeadLetterAction = 3
	// DeadLettersPurge drops dead letters.
	DeadLettersPurge DeadLetterAction = 4
)

var deadLetterActionNames = map[DeadLetterAction]string{
	DeadLettersList:    "list",
	DeadLettersInspect: "inspect",
	DeadLettersRedrive: "redrive",
	DeadLettersPurge:   "purge",
}

// String returns the action's name.
func (a DeadLetterAction) String() string {
	if s, ok := deadLetterActionNames[a]; ok {
		return s
	}
	return fmt.Sprintf("dead-letter-action(%d)", uint8(a))
}

// DeadLettersRequest lists, inspects, re-drives or purges a group's dead
// letters on one broker.
type DeadLettersRequest struct {
	Action  DeadLetterAction
	Subject string // the user subject, not %DEAD%…
	Group   string
	After   uint64 // list: return sequences above this
	Max     uint32 // list: at most this many (0: the broker's default)
	IDs     []string
}

// AppendDeadLettersRequest appends the body of r.
func AppendDeadLettersRequest(dst []byte, r *DeadLettersRequest) []byte {
	dst = append(dst, uint8(r.Action))
	dst = appendString16(dst, r.Subject)
	dst = appendString8(dst, r.Group)
	dst = binary.BigEndian.AppendUint64(dst, r.After)
	dst = binary.BigEndian.AppendUint32(dst, r.Max)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(r.IDs)))
	for _, id := range r.IDs {
		dst = appendString8(dst, id)
	}
	return dst
}

// DecodeDeadLettersRequest decodes a dead letters request body; an unknown
// action is ErrBadRequest.
func DecodeDeadLettersRequest(body []byte) (DeadLettersRequest, error) {
	r := reader{b: body}
	q := DeadLettersRequest{Action: DeadLetterAction(r.u8())}
	q.Subject = string(r.bytes16())
	q.Group = r.string8()
	q.After = r.u64()
	q.Max = r.u32()
	n := int(r.u16())
	if r.err == nil && n > len(body)-r.off {
		r.err = ErrTruncated
	}
	for i := 0; i < n && r.err == nil; i++ {
		q.IDs = append(q.IDs, r.string8())
	}
	if err := r.done(); err != nil {
		return DeadLettersRequest{}, fmt.Errorf("%w: dead letters request", err)
	}
	if _, ok := deadLetterActionNames[q.Action]; !ok {
		return DeadLettersRequest{}, fmt.Errorf("%w: dead letters action %d", ErrBadRequest, q.Action)
	}
	return q, nil
}

// DeadLetter is one stored dead letter: its sequence in the dead-letter
// subject and its message encoding.
type DeadLetter struct {
	Seq     uint64
	Message []byte
}

// DeadLettersResponse answers a DeadLettersRequest.
type DeadLettersResponse struct {
	Total    uint64
	Affected uint64
	Letters  []DeadLetter
}

// AppendDeadLettersResponse appends the body of r.
func AppendDeadLettersResponse(dst []byte, r *DeadLettersResponse) []byte {
	dst = binary.BigEndian.AppendUint64(dst, r.Total)
	dst = binary.BigEndian.AppendUint64(dst, r.Affected)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(r.Letters)))
	for _, l := range r.Letters {
		dst = binary.BigEndian.AppendUint64(dst, l.Seq)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(l.Message)))
		dst = append(dst, l.Message...)
	}
	return dst
}

// DecodeDeadLettersResponse decodes a dead letters response body. Each
// Message aliases body.
func DecodeDeadLettersResponse(body []byte) (DeadLettersResponse, error) {
	r := reader{b: body}
	q := DeadLettersResponse{Total: r.u64(), Affected: r.u64()}
	n := r.count(deadLetterMinSize)
	for i := 0; i < n && r.err == nil; i++ {
		l := DeadLetter{Seq: r.u64()}
		l.Message = r.bytes32()
		q.Letters = append(q.Letters, l)
	}
	if err := r.done(); err != nil {
		return DeadLettersResponse{}, fmt.Errorf("%w: dead letters response", err)
	}
	return q, nil
}

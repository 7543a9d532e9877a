package protocol

import (
	"encoding/binary"
	"fmt"
)

// Replication bodies (CmdSyncLog): a slave asks its master for the raw bytes
// of the master's logs past its own ends, big-endian:
//
//	sync request   epoch u64 | group s8 | message offset i64 | action offset i64 |
//	               message durable i64 |
//	               message segment size i64 | action segment size i64 |
//	               max bytes u32 | wait ms u32 | generation u64 |
//	               lease stamp u64 | slave id s8
//	sync response  epoch u64 | generation u64 | cut i64 | lease stamp u64 |
//	               message chunk | action chunk
//	chunk          start i64 | end i64 | offset i64 | data len u32 | data
//
// group is the slave's broker group (a master refuses a slave of another
// group). The request's offsets are where to read from: the ends of what
// the slave has received (it may fetch the next chunk while it writes the
// last one); message durable is the end of its message log that is on its
// disk, its acknowledgement (at most message offset). Max bytes 0 asks for
// no data: an acknowledgement only (sent one-way). The segment sizes must equal the master's so the
// copies line up byte for byte; max bytes bounds each chunk's data (the
// first record is sent whole even when larger); wait is how long the master
// may hold the request when it has nothing new. A chunk is whole records
// copied from one segment of the log: start is the first offset the master
// still keeps, end its committed end, offset where data starts (the offset
// asked for, the next segment's base past a segment's padding, or start
// when the master no longer keeps the offset asked for). The message
// chunk's data may reach past end (and its offset lie past it): records the
// master has written but not yet made durable, which a slave copies
// tentatively. epoch is the group's epoch (0 until automatic failover
// assigns epochs); a master refuses a request from an older epoch with
// StatusStaleEpoch.
//
// generation counts the master's message-log cuts (a failed write or
// fdatasync cuts its log back to its committed end, so bytes it served
// tentatively may be replaced); a slave sends the latest one it was told
// since it started following (0 before the first answer), and a master
// counts the acknowledgement of a request from an older generation only up
// to the cuts made after it. cut is -1,
// or the offset the slave must cut its message log back to before it asks
// again: its copy reaches past a cut and may hold records the master no
// longer has (the chunks are then empty).
//
// lease stamp and slave id serve failover (pkg/failover): a response's
// stamp is the master's clock when it sent it; a request carries the stamp
// of the latest response the slave received (0 none), whose receipt
// started the slave's promise not to campaign for the slave lease's
// length, so the master counts its slave lease from that stamp. slave id
// is the slave's broker id as registered: what the master records in its
// group's eligible set.

// SyncRequest asks a master for its logs past the slave's ends.
type SyncRequest struct {
	Epoch              uint64
	Group              string
	MessageOffset      int64
	ActionOffset       int64
	MessageDurable     int64
	MessageSegmentSize int64
	ActionSegmentSize  int64
	MaxBytes           uint32
	WaitMillis         uint32
	Generation         uint64
	LeaseStamp         uint64
	SlaveID            string
}

// SyncChunk is a run of whole log records.
type SyncChunk struct {
	Start, End, Offset int64
	Data               []byte
}

// SyncResponse carries a chunk of each log, or a cut.
type SyncResponse struct {
	Epoch      uint64
	Generation uint64
	Cut        int64 // -1: none
	LeaseStamp uint64
	Message    SyncChunk
	Action     SyncChunk
}

// AppendSyncRequest appends the body of q.
func AppendSyncRequest(dst []byte, q *SyncRequest) []byte {
	dst = binary.BigEndian.AppendUint64(dst, q.Epoch)
	dst = appendString8(dst, q.Group)
	dst = binary.BigEndian.AppendUint64(dst, uint64(q.MessageOffset))
	dst = binary.BigEndian.AppendUint64(dst, uint64(q.ActionOffset))
	dst = binary.BigEndian.AppendUint64(dst, uint64(q.MessageDurable))
	dst = binary.BigEndian.AppendUint64(dst, uint64(q.MessageSegmentSize))
	dst = binary.BigEndian.AppendUint64(dst, uint64(q.ActionSegmentSize))
	dst = binary.BigEndian.AppendUint32(dst, q.MaxBytes)
	dst = binary.BigEndian.AppendUint32(dst, q.WaitMillis)
	dst = binary.BigEndian.AppendUint64(dst, q.Generation)
	dst = binary.BigEndian.AppendUint64(dst, q.LeaseStamp)
	return appendString8(dst, q.SlaveID)
}

// DecodeSyncRequest decodes a sync request body. Negative offsets or
// segment sizes are rejected.
func DecodeSyncRequest(body []byte) (SyncRequest, error) {
	r := reader{b: body}
	q := SyncRequest{
		Epoch:              r.u64(),
		Group:              r.string8(),
		MessageOffset:      int64(r.u64()),
		ActionOffset:       int64(r.u64()),
		MessageDurable:     int64(r.u64()),
		MessageSegmentSize: int64(r.u64()),
		ActionSegmentSize:  int64(r.u64()),
		MaxBytes:           r.u32(),
		WaitMillis:         r.u32(),
		Generation:         r.u64(),
		LeaseStamp:         r.u64(),
		SlaveID:            r.string8(),
	}
	if err := r.done(); err != nil {
		return SyncRequest{}, fmt.Errorf("%w: sync request", err)
	}
	if q.MessageOffset < 0 || q.ActionOffset < 0 || q.MessageSegmentSize <= 0 || q.ActionSegmentSize <= 0 {
		return SyncRequest{}, fmt.Errorf("%w: sync request with a negative offset or segment size", ErrInvalid)
	}
	if q.MessageDurable < 0 || q.MessageDurable > q.MessageOffset {
		return SyncRequest{}, fmt.Errorf("%w: sync request acknowledges %d, past its offset %d", ErrInvalid, q.MessageDurable, q.MessageOffset)
	}
	return q, nil
}

func appendSyncChunk(dst []byte, c *SyncChunk) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Start))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.End))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Offset))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(c.Data)))
	return append(dst, c.Data...)
}

// AppendSyncResponseHead appends a sync response up to the message chunk's
// data, so a server can write the data from its own buffers after it (the
// action chunk follows with AppendSyncChunkHead). p's chunks' data are not
// appended.
func AppendSyncResponseHead(dst []byte, p *SyncResponse) []byte {
	dst = binary.BigEndian.AppendUint64(dst, p.Epoch)
	dst = binary.BigEndian.AppendUint64(dst, p.Generation)
	dst = binary.BigEndian.AppendUint64(dst, uint64(p.Cut))
	dst = binary.BigEndian.AppendUint64(dst, p.LeaseStamp)
	return AppendSyncChunkHead(dst, &p.Message)
}

// AppendSyncChunkHead appends a chunk's fields up to its data.
func AppendSyncChunkHead(dst []byte, c *SyncChunk) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Start))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.End))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Offset))
	return binary.BigEndian.AppendUint32(dst, uint32(len(c.Data)))
}

// AppendSyncResponse appends the body of p.
func AppendSyncResponse(dst []byte, p *SyncResponse) []byte {
	dst = binary.BigEndian.AppendUint64(dst, p.Epoch)
	dst = binary.BigEndian.AppendUint64(dst, p.Generation)
	dst = binary.BigEndian.AppendUint64(dst, uint64(p.Cut))
	dst = binary.BigEndian.AppendUint64(dst, p.LeaseStamp)
	dst = appendSyncChunk(dst, &p.Message)
	return appendSyncChunk(dst, &p.Action)
}

func (r *reader) syncChunk() SyncChunk {
	return SyncChunk{Start: int64(r.u64()), End: int64(r.u64()), Offset: int64(r.u64()), Data: r.bytes32()}
}

// DecodeSyncResponse decodes a sync response body; the chunks' data alias
// body. A chunk whose offsets are inconsistent (offset below start, an
// action chunk's offset past end or data reaching past end) is rejected, as
// is a cut below -1 or a cut that comes with data.
func DecodeSyncResponse(body []byte) (SyncResponse, error) {
	r := reader{b: body}
	p := SyncResponse{Epoch: r.u64(), Generation: r.u64(), Cut: int64(r.u64()), LeaseStamp: r.u64()}
	p.Message = r.syncChunk()
	p.Action = r.syncChunk()
	if err := r.done(); err != nil {
		return SyncResponse{}, fmt.Errorf("%w: sync response", err)
	}
	if p.Cut < -1 || p.Cut >= 0 && len(p.Message.Data)+len(p.Action.Data) > 0 {
		return SyncResponse{}, fmt.Errorf("%w: sync response cut %d with %d bytes of data", ErrInvalid, p.Cut, len(p.Message.Data)+len(p.Action.Data))
	}
	m, a := &p.Message, &p.Action
	if m.Start < 0 || m.End < 0 || m.Offset < m.Start {
		return SyncResponse{}, fmt.Errorf("%w: sync message chunk start %d offset %d end %d", ErrInvalid, m.Start, m.Offset, m.End)
	}
	if a.Start < 0 || a.Offset < a.Start || a.Offset > a.End || a.Offset+int64(len(a.Data)) > a.End {
		return SyncResponse{}, fmt.Errorf("%w: sync chunk start %d offset %d (%d bytes) end %d", ErrInvalid, a.Start, a.Offset, len(a.Data), a.End)
	}
	return p, nil
}
